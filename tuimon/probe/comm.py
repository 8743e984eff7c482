"""Time the step spends in collectives (torch.distributed), with no code change and no added
synchronization.

- Explicit calls (dist.all_reduce, all_gather, broadcast, barrier, ...; what FSDP calls too): the
  loop thread's time inside the call is the "comm" phase (gloo blocks there; NCCL only queues).
  A blocking call on CUDA tensors also gets a pair of CUDA events on the current stream, before
  and after: the stream waits for the collective after the call, so the pair's GPU time is what
  the stream spent in it, waiting for the other ranks included.
- DDP's gradient reduction, which DDP runs itself (no tuimon hook in it: a Python comm hook cost
  ~1.8 ms on a 5.4 ms step on two H200s). Each DDP module gets, once, a post-accumulate-grad hook
  on one of its parameters (three with find_unused_parameters, where one may get no gradient). In
  a backward after a DDP forward that will reduce, the first of them to fire queues an autograd
  final callback; it runs when every gradient kernel is queued and before DDP's own final
  callback (queued when the last bucket is ready, after our hook), which waits for the reduction
  (gloo: on the host) or makes the stream wait (NCCL). From that callback to the end of backward
  is the wait: the "comm" phase on the host, and a pair of CUDA events (the callback -> after
  backward) on the GPU. Overlapped reduction is not counted: only the part the step waits for.
  (A hook on the loss each step did the same but cost ~20 us a step to register.)

Per step (STEP_VALUE): comm.gpu_ns (event pairs, emitted once resolved, a step or two late),
comm.bytes (tensors handed to collectives) and comm.calls. Events are never waited for. Event pairs
go on the steps gpu_timing.py measures (about one per 160 ms: events cost more than their host
time in a DDP job, gpu_timing.py says how much); the monitor averages the steps that have one."""

from __future__ import annotations

import functools
import weakref
from collections import deque
from time import monotonic_ns as _now
from typing import TYPE_CHECKING, Any

from ..channel import layout as L
from . import graphs, state
from .anatomy import BACKWARD, COMM
from .marks import TIMES_FORWARD, mark

if TYPE_CHECKING:
    from .core import Probe
    from .gpu_timing import GpuTiming

COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
               "broadcast", "reduce", "all_to_all", "all_to_all_single", "barrier", "gather", "scatter",
               "all_gather_object", "broadcast_object_list")
MAX_PENDING = 64  # event pairs not yet resolved; more: the GPU is far behind, skip rather than pile up


class CommTiming:
    def __init__(self, torch: Any, emit: Any, intern: Any, tid_of_record: Any) -> None:
        self.torch = torch
        self.cuda = torch.cuda if torch.cuda.is_available() else None
        self._emit, self._intern, self._tid = emit, intern, tid_of_record
        self.bytes = 0  # this step's
        self.calls = 0
        self._pairs: deque = deque()  # (step, start event, end event), oldest first
        self.pending: dict[int, list] = {}  # step -> [ns so far, pairs pending]: event pairs not yet resolved
        self._free: list = []
        self.reducing = 0  # bytes a DDP forward of this step will all-reduce in backward (0: none)
        self._final: tuple[int, object] | None = None  # (host ns, event) when backward's gradients were all queued
        self._armed = False  # this backward's final callback is queued
        # DDP modules whose parameters have our hook, by id: (the module, weakly; its gradients' bytes; the
        # hooks). Kept here, never in the module: the job's copy.deepcopy(ddp) would copy the probe with it
        self._ddp: dict[int, tuple[weakref.ref, int, list]] = {}
        self._names: dict[str, int] = {}
        self._bytes_id, self._calls_id = intern("comm.bytes"), intern("comm.calls")
        self.gpu: GpuTiming | None = None  # the probe's GpuTiming: its measured steps get event pairs (none without it)
        self._ddp_iteration = None  # the iteration of DDP's own timing last read (sample_ddp)
        self.last_call = 0  # name id of the last collective the loop called (what a stalled rank waits in)
        self._ddp_call = intern("all_reduce (DDP's gradient buckets)")

    # -- explicit collectives (the loop thread) -----------------------------------------------------

    def event(self) -> Any:
        gpu = self.gpu
        if gpu is None or not gpu.measuring or self.cuda is None or not self.cuda.is_initialized() \
                or len(self._pairs) >= MAX_PENDING or graphs.capturing(self.cuda):
            return None
        ev = self._free.pop() if self._free else self.cuda.Event(enable_timing=True)
        gpu.record_on(ev)
        return ev

    def add_pair(self, step: int, start: Any, end: Any) -> None:
        if start is None or end is None:
            return
        self._pairs.append((step, start, end))
        self.pending.setdefault(step, [0, 0])[1] += 1

    def count(self, nbytes: int) -> None:
        self.bytes += nbytes
        self.calls += 1

    # -- DDP (the loop thread, then autograd's) --------------------------------------------------

    def ddp_forward(self, module: Any) -> None:
        """A DDP forward that will reduce in its backward (the loop thread)."""
        seen = self._ddp.get(id(module))
        if seen is None or seen[0]() is not module:
            params = [p for p in (getattr(module, "_module_parameters", None) or module.parameters()) if p.requires_grad]
            nbytes = _nbytes(params)  # what its reduction moves
            picks = params[:1] if not getattr(module, "find_unused_parameters", False) else \
                list({id(p): p for p in (params[:1] + params[len(params) // 2:][:1] + params[-1:])}.values())
            try:
                hooks = [p.register_post_accumulate_grad_hook(self._queue_final) for p in picks]
            except Exception:  # noqa: BLE001 - a torch without the hook: no DDP timing
                hooks = []
            self._ddp[id(module)] = seen = (weakref.ref(module, self._forget), nbytes, hooks)
        nbytes = seen[1]
        self.reducing = nbytes

    def _forget(self, ref: weakref.ref) -> None:
        """A DDP module is gone: its id may be another module's next."""
        for key, seen in list(self._ddp.items()):
            if seen[0] is ref:
                del self._ddp[key]

    def sample_ddp(self, step: int) -> None:
        """(the control thread, ~every 0.5 s) DDP's own timing of the last iteration it sampled (every
        100th by default; CUDA events on GPUs): its backward's compute, as a gauge. The monitor compares
        it between ranks: waiting NCCL kernels slow the backward of the ranks that wait
        (analysis/ranks.py)."""
        try:
            module = next((m for m in (ref() for ref, _, _ in list(self._ddp.values())) if m is not None), None)
            #   (a job's DDP model; the loop may add one meanwhile)
            data = module._get_ddp_logging_data() if module is not None else {}
        except Exception:  # noqa: BLE001 - a DDP without its logger, or a set changed under us: none this time
            return
        it, ns = data.get("iteration"), data.get("backward_compute_time")
        if not isinstance(ns, int) or ns <= 0 or it == self._ddp_iteration:
            return
        self._ddp_iteration = it
        self._emit(L.GAUGE, 0, self._name("ddp.backward_compute_ns"), self._tid(), step, 0, _now(), float(ns))

    def set_enabled(self, on: bool) -> None:
        """Off: the parameters' hooks removed (a forward re-adds them once the probe is on again)."""
        if on:
            return
        for _, _, hooks in list(self._ddp.values()):
            for h in hooks:
                h.remove()
        self._ddp = {}

    def _queue_final(self, param: Any) -> None:
        # (in the engine, as a gradient is accumulated: the loop thread waits in backward meanwhile)
        if not self.reducing or self._armed:
            return
        self._armed = True
        try:
            self.torch.autograd.Variable._execution_engine.queue_callback(self._gradients_queued)
        except Exception:  # noqa: BLE001 - timing never breaks backward
            pass

    def _gradients_queued(self) -> None:
        # (on autograd's thread while the loop thread waits in backward: nothing here runs at once)
        self._final = (_now(), self.event())

    def backward_done(self, probe: Probe, t_end: int) -> None:
        """A backward returned at t_end: what followed the gradients being queued was DDP's wait
        for its reduction. (Called only while `reducing`: nothing is armed or queued otherwise.)"""
        final, self._final, self._armed = self._final, None, False
        if final is None or not self.reducing:
            return
        self.bytes += self.reducing
        self.calls += 1
        self.reducing = 0
        self.last_call = self._ddp_call
        t_final, start = final
        probe.anatomy.move(BACKWARD, COMM, t_final, t_end)
        if start is not None:
            self.add_pair(probe.step_no, start, self.event())

    # -- the step boundary (the loop thread) ------------------------------------------------------------

    def close(self, step: int, t1: int, tid: int) -> None:
        """The step ended; a DDP forward whose backward never came (evaluation with grad on) reduces nothing.
        (Called only while reducing, calls or pending is set: otherwise there is nothing to close.)"""
        self.reducing, self._armed, self._final = 0, False, None
        if self.calls:
            self._emit(L.STEP_VALUE, 0, self._bytes_id, tid, step, 0, t1, float(self.bytes))
            self._emit(L.STEP_VALUE, 0, self._calls_id, tid, step, 0, t1, float(self.calls))
            self.bytes = self.calls = 0
        if self.pending and not graphs.capturing(self.cuda):  # event pairs pending (queried outside a capture)
            self._resolve(step, t1, tid)

    def _resolve(self, now_step: int, t1: int, tid: int) -> None:
        while self._pairs:
            step, a, b = self._pairs[0]
            if not b.query():
                break
            self._pairs.popleft()
            acc = self.pending[step]
            acc[0] += max(0.0, a.elapsed_time(b)) * 1e6
            acc[1] -= 1
            self._free += (a, b)
        for step in sorted(self.pending):
            acc = self.pending[step]
            if step > now_step or acc[1] > 0:
                break
            self._emit(L.STEP_VALUE, 0, self._name("comm.gpu_ns"), tid, step, 0, t1, float(acc[0]))
            del self.pending[step]

    def _name(self, name: str) -> int:
        nid = self._names.get(name)
        if nid is None:
            nid = self._names[name] = self._intern(name)
        return nid


def _nbytes(x: Any) -> int:
    """Bytes in a tensor or a list of tensors (0 for anything else: objects, None)."""
    try:
        if isinstance(x, (list, tuple)):
            return sum(_nbytes(t) for t in x)
        return x.numel() * x.element_size()
    except Exception:  # noqa: BLE001 - not a tensor
        return 0


def _collective(orig: Any, compiling: Any) -> Any:
    name = getattr(orig, "__name__", "collective")

    @functools.wraps(orig)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if compiling():  # (first: under torch.compile the wrapper traces to nothing)
            return orig(*args, **kwargs)
        p = state.probe
        comm = p.comm if p is not None else None  # (None: no probe, or no torch.distributed timing)
        if comm is None or p is None or not p.anatomy.on_loop():
            return orig(*args, **kwargs)
        first = args[0] if args else next(iter(kwargs.values()), None)
        cuda = getattr(first, "is_cuda", False) or (isinstance(first, (list, tuple)) and first
                                                    and getattr(first[0], "is_cuda", False))
        blocking = not kwargs.get("async_op", False)  # (async_op is passed by keyword in practice)
        comm.count(_nbytes(first))
        comm.last_call = comm._name(name)
        start = comm.event() if cuda and blocking else None
        p.anatomy.enter(COMM)
        try:
            return orig(*args, **kwargs)
        finally:
            p.anatomy.exit(COMM)
            if start is not None:
                comm.add_pair(p.step_no, start, comm.event())

    mark(wrapper)
    return wrapper


def patch(torch: Any, swap: Any, compiling: Any) -> None:
    """Wrap torch.distributed's collectives and DDP, with swap(owner, name, wrapper)."""
    dist = getattr(torch, "distributed", None)
    if dist is None or not dist.is_available():
        return
    for name in COLLECTIVES:
        orig = getattr(dist, name, None)
        if orig is not None and not getattr(orig, "_tuimon", False):
            swap(dist, name, _collective(orig, compiling))
    _patch_ddp(torch, swap, compiling)


# -- DDP --------------------------------------------------------------------------------------------


def _patch_ddp(torch: Any, swap: Any, compiling: Any) -> None:
    try:
        from torch.nn.parallel import DistributedDataParallel as DDP
    except Exception:  # noqa: BLE001 - no DDP in this build
        return
    if getattr(DDP.forward, "_tuimon", False):
        return
    orig_forward = DDP.forward

    @functools.wraps(orig_forward)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if compiling():
            return orig_forward(self, *args, **kwargs)
        p = state.probe
        comm = getattr(p, "comm", None)
        if comm is not None and torch.is_grad_enabled() and getattr(self, "require_backward_grad_sync", False):
            comm.ddp_forward(self)
        roots = getattr(p, "roots", None)
        if roots is not None and roots.times(self):  # a DDP model's forward phase, without module hooks
            return roots.call(self, orig_forward, args, kwargs)
        return orig_forward(self, *args, **kwargs)

    mark(forward)
    mark(forward, TIMES_FORWARD)  # ModuleRoots: this wrapper opens the forward phase itself
    swap(DDP, "forward", forward)
