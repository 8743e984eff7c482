"""torch.nn.DataParallel, seen from the loop thread, with no code change.

DataParallel's forward (the loop thread) scatters the inputs over its GPUs, replicates the model to
each of them, runs the replicas' forwards on threads of its own (parallel_apply: the loop thread
waits in their join) and gathers the outputs on the first GPU. Those four are public methods of
torch.nn.DataParallel; each is wrapped here, as the probe wraps Optimizer.step and DataLoader
iterators, and timed on the loop thread (another thread calling them, or torch.compile tracing them,
calls straight through). Per step (STEP_VALUE): dp.replicate_ns, dp.scatter_ns, dp.apply_ns (the loop
thread waiting in the replicas' join), dp.gather_ns and dp.devices (the GPUs in device_ids); all of it
is inside the forward phase, which DataParallel's own forward opens (its class wrapper, as DDP's).

The replicas' forwards run on parallel_apply's threads: the probe's module hooks and tensor
wrappers return at their first check there (the calling thread is not the loop thread), and after
the first steps (torch_hooks.DISCOVER_STEPS) no module hook of the probe's is left on the model or
its replicas: DataParallel's own forward is timed by its class, not by a hook.

While the loop waits in the replicas' join, the probe's line sampler asks nothing (sampler.py park):
its requests would wake a thread of the probe's that takes the GIL from the replicas 50 times a
second; the join's periods are counted as waiting samples at the line that called the model.

GPU time: the replicas run on their own devices' current streams (captured by the loop thread
before it starts them), where the probe's events on the loop's stream do not look. On the steps
gpu_timing.py measures (about one per 160 ms), a pair of CUDA events goes on each replica's device's
current stream around parallel_apply; once all of them have completed (queried at a later step's
end, never waited for), dp.gpu_ns is the longest pair's GPU time: the replicas' forward on the
slowest device, from the moment the loop thread started them (work still queued on that stream
before it included). Without CUDA events it is not said: the monitor then says it is unknown.

Every wrapper calls the original and keeps its behaviour (results, exceptions); what it does
around the call catches everything."""

from __future__ import annotations

import functools
import sys
from collections import deque
from time import monotonic_ns as _now
from typing import TYPE_CHECKING, Any

from ..channel import layout as L
from . import graphs, state
from .marks import TIMES_FORWARD, mark

if TYPE_CHECKING:
    from .gpu_timing import GpuTiming

PARTS = ("replicate", "scatter", "apply", "gather")  # dp.<part>_ns
REPLICATE, SCATTER, APPLY, GATHER = range(len(PARTS))
METHODS = (("replicate", REPLICATE), ("scatter", SCATTER), ("parallel_apply", APPLY), ("gather", GATHER))
MAX_PENDING = 16  # steps with event pairs not yet resolved; more: the GPUs are far behind, skip rather than pile up


class DataParallelTiming:
    def __init__(self, torch: Any, emit: Any, intern: Any, tid_of_record: Any) -> None:
        cuda = getattr(torch, "cuda", None)
        self.cuda: Any = cuda if cuda is not None and cuda.is_available() else None
        self._emit, self._tid = emit, tid_of_record
        self._ids = [intern(f"dp.{p}_ns") for p in PARTS]
        self._devices_id, self._gpu_id = intern("dp.devices"), intern("dp.gpu_ns")
        self.ns = [0] * len(PARTS)  # this step's, on the loop thread
        self.devices = 0  # this step's DataParallel's GPUs
        self.active = False  # a DataParallel part ran this step (close() has something to say)
        self.pending: deque = deque()  # (step, [(start event, end event), ...]) not yet resolved, oldest first
        self._free: dict[int, list] = {}  # device -> events made on it, free again
        self.gpu: GpuTiming | None = None  # the probe's GpuTiming: event pairs only on the steps it measures

    def add(self, part: int, ns: int, devices: int = 0) -> None:
        self.ns[part] += ns
        if devices > self.devices:
            self.devices = devices
        self.active = True

    # -- GPU time on the replicas' streams ----------------------------------------------------------

    def start_events(self, devices: Any) -> list | None:
        """Before parallel_apply, on a measured step: an event on each device's current stream (the
        stream the replica on it will run on). None: not this step, or no CUDA."""
        gpu, cuda = self.gpu, self.cuda
        if gpu is None or cuda is None or not gpu.measuring or len(self.pending) >= MAX_PENDING \
                or not devices or graphs.open_captures or not cuda.is_initialized():
            return None
        return [(d, self._record(d)) for d in devices]

    def end_events(self, step: int, starts: list) -> None:
        """After parallel_apply: the replicas' work is queued; the pair's second events."""
        self.pending.append((step, [(start, d, self._record(d)) for d, start in starts]))

    def _record(self, device: Any) -> Any:
        free = self._free.get(device)
        ev = free.pop() if free else self.cuda.Event(enable_timing=True)
        ev.record(self.cuda.current_stream(device))
        return ev

    def _resolve(self, tid: int, t1: int) -> None:
        while self.pending:
            step, pairs = self.pending[0]
            if not all(end.query() for _, _, end in pairs):
                return
            self.pending.popleft()
            longest = max(max(0.0, start.elapsed_time(end)) for start, _, end in pairs)
            for start, d, end in pairs:
                self._free.setdefault(d, []).extend((start, end))
            self._emit(L.STEP_VALUE, 0, self._gpu_id, tid, step, 0, t1, float(longest * 1e6))

    # -- the step boundary (the loop thread) ----------------------------------------------------------

    def close(self, step: int, t1: int, tid: int) -> None:
        """The step ended (called while `active` or `pending`)."""
        if self.active:
            emit = self._emit
            for nid, ns in zip(self._ids, self.ns, strict=True):
                emit(L.STEP_VALUE, 0, nid, tid, step, 0, t1, float(ns))
            if self.devices:
                emit(L.STEP_VALUE, 0, self._devices_id, tid, step, 0, t1, float(self.devices))
            self.ns = [0] * len(PARTS)
            self.devices, self.active = 0, False
        if self.pending and not graphs.open_captures:
            try:
                self._resolve(tid, t1)
            except Exception:  # noqa: BLE001 - a failed query: these pairs are dropped, the job goes on
                self.pending.clear()


def _part(orig: Any, part: int, compiling: Any) -> Any:
    """A DataParallel method timed on the loop thread (parallel_apply: with its event pairs)."""

    @functools.wraps(orig)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if compiling():
            return orig(self, *args, **kwargs)
        p = state.probe
        dp = p.dp if p is not None else None
        if dp is None or p is None or not p.anatomy.on_loop():
            return orig(self, *args, **kwargs)
        starts = devices = sampler = None
        try:
            devices = list(getattr(self, "device_ids", None) or ())
            if part == APPLY:
                replicas = args[0] if args else kwargs.get("replicas", ())
                starts = dp.start_events(devices[:len(replicas)])
                sampler = getattr(p, "sampler", None)
                if sampler is not None and not sampler.park():  # (the loop's line sampler: sampler.py park)
                    sampler = None
        except Exception:  # noqa: BLE001 - no events this step
            starts = None
        t0 = _now()
        try:
            return orig(self, *args, **kwargs)
        finally:
            t1 = _now()
            if sampler is not None:
                try:
                    sampler.unpark(t0, t1, sys._getframe())
                except Exception:  # noqa: BLE001 - (unpark resumes the requests first)
                    pass
            try:
                dp.add(part, t1 - t0, len(devices) if devices else 0)
                if starts:
                    dp.end_events(p.step_no, starts)
            except Exception:  # noqa: BLE001 - timing never breaks the job's forward
                pass

    mark(wrapper)
    return wrapper


def patch(torch: Any, swap: Any, compiling: Any) -> None:
    """Wrap torch.nn.DataParallel's forward (timed as the forward phase, as a root, once the probe has
    found its roots) and its four parts, with swap(owner, name, wrapper)."""
    try:
        from torch.nn.parallel import DataParallel
    except Exception:  # noqa: BLE001 - no DataParallel in this build
        return
    if getattr(DataParallel.forward, "_tuimon", False):
        return
    for name, part in METHODS:
        orig = getattr(DataParallel, name, None)
        if orig is not None and not getattr(orig, "_tuimon", False):
            swap(DataParallel, name, _part(orig, part, compiling))
    orig_forward = DataParallel.forward

    @functools.wraps(orig_forward)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if compiling():
            return orig_forward(self, *args, **kwargs)
        roots = getattr(state.probe, "roots", None)
        if roots is not None and roots.times(self):  # the model's forward phase, without module hooks
            return roots.call(self, orig_forward, args, kwargs)
        return orig_forward(self, *args, **kwargs)

    mark(forward)
    mark(forward, TIMES_FORWARD)  # ModuleRoots: this wrapper opens the forward phase itself
    swap(DataParallel, "forward", forward)
