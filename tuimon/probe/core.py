"""The probe inside the training process: ranges, steps, data waits, counters.

Hot path: tuimon.range is channel.ring.Range (C when built). What is here runs per step, per
push/pop-style range, per phase change or per device-to-host sync (anatomy.py). Nothing here may raise into the training loop, block on the monitor, or
import torch. Nesting depth per thread lives in channel.ring, shared by every kind of range.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections.abc import Callable
from time import monotonic_ns as _now
from typing import TYPE_CHECKING, Any

from ..channel import layout as L
from ..channel import ring
from ..channel.writer import SegmentWriter
from . import graphs
from .anatomy import DATA, Anatomy

if TYPE_CHECKING:
    from .capture import Capturer
    from .comm import CommTiming
    from .copies import Copies
    from .data_parallel import DataParallelTiming
    from .gpu_timing import GpuTiming
    from .ops import OpCounter
    from .present import Present
    from .sampler import LoopSampler
    from .torch_hooks import ModuleRoots

_tls = threading.local()

# Where step boundaries come from (layout.STEP_SOURCES), weakest first. The strongest source seen
# counts the steps: an optimizer's step or tuimon.step() where the loop has one; else, with no code
# change, the loop's own period: its outermost backward(), its outermost module call, its
# DataLoader's next(). A data loader and a module call mark where an iteration starts; the others
# where it ends.
# Plain ints bound from layout.StepSource: boundary() compares them a few times a step, and an IntEnum member
# compares slower than an int (here, Python 3.11: `<` 49 ns against 35, `in` a tuple 63 against 31).
NO_SOURCE, DATALOADER, FORWARD_CALL, BACKWARD_CALL, OPTIMIZER_STEP, EXPLICIT = (int(s) for s in L.StepSource)
_STARTS_ITERATION = (DATALOADER, FORWARD_CALL)
WARMUP_STEPS = 5  # steps not counted in the longest one (analysis/thresholds.py STALL_WARMUP_STEPS says why)
MEMORY_STATS = (("cuda.allocated", "allocated_bytes.all.current"), ("cuda.reserved", "reserved_bytes.all.current"),
                ("cuda.peak_allocated", "allocated_bytes.all.peak"), ("cuda.alloc_retries", "num_alloc_retries"),
                ("cuda.ooms", "num_ooms"), ("cuda.inactive_split", "inactive_split_bytes.all.current"),
                ("cuda.peak_reserved", "reserved_bytes.all.peak"))


def _memory_limits(torch: Any, device: Any) -> list[tuple[str, int]]:
    """The device's memory and the allocator's cap on it (set_per_process_memory_fraction), where
    this torch says them (cheap: cached device properties, one read of the fraction)."""
    total = torch.cuda.get_device_properties(device).total_memory
    out = [("cuda.total", total), ("cuda.expandable_segments", int(_expandable_segments()))]
    fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    if fraction is not None:
        f = fraction(device)
        if 0 < f < 1:
            out.append(("cuda.limit", int(total * f)))
    return out


def _expandable_segments() -> bool:
    """Whether the job's allocator settings (read by torch from the environment) ask for
    expandable segments."""
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF") or ""
    for part in conf.split(","):
        key, _, value = part.partition(":")
        if key.strip() == "expandable_segments":
            return value.strip().lower() == "true"
    return False


def open_ranges() -> list[tuple[int, int, int]]:
    """This thread's open push_range-style ranges: (name id, t0, depth), innermost last."""
    try:
        return _tls.stack
    except AttributeError:
        stack: list[tuple[int, int, int]] = []
        _tls.stack = stack
        return stack


class Probe:
    """One per process. Steps are numbered from 1; a record carries the step it happened in."""

    _control_stop: threading.Event  # (set by api.py with the control thread, when it starts; unset before)
    _control_thread: threading.Thread

    def __init__(self, writer: SegmentWriter, nvtx_domain: Any = None) -> None:
        self.writer = writer
        self.emit = writer.emit
        self.intern = writer.intern
        self.names = writer.names  # name -> id, read without the lock on the hot path
        self.step_no = 1
        self.step_t0 = 0  # when the current step began (0: not yet known)
        self.first_t0 = 0  # when the job's first step began (0: not yet): the sampler cuts its setup there
        self.longest_ns = 0  # the longest step so far, warm-up left out: a monitor's bar for a stall
        self.created_ns = _now()
        self.source: int = NO_SOURCE  # what counts the steps (see STEP_SOURCES above)
        self._lead_optimizer: Callable[[], object] | None = None  # a weak reference (or a closure) to it
        self._data_seen = self._data_since_boundary = False  # the loop's DataLoader: ever, since the last step
        # the loop's model call or backward (the hooks set them): ever, since the last step. An optimizer step
        # with no batch, model call or backward since the last one is the same iteration's (a loop that steps
        # its optimizer twice an iteration: issue 43 item 14)
        self.work_seen = self.work_since_boundary = False
        self._nvtx = nvtx_domain
        self._nvtx_attrs: dict = {}
        self.capturer: Capturer | None = None  # capture windows (probe/capture.py), set by instrument()
        self.present: Present | None = None  # the step in progress and the job's end (probe/present.py), set by instrument()
        self.sampler: LoopSampler | None = None  # the loop thread's lines (probe/sampler.py), set by instrument()
        self.copies: Copies | None = None  # copies.Copies, once torch is imported and has CUDA
        self.ops: OpCounter | None = None  # ops.OpCounter: one step in N counted, once torch is imported
        self._bad_count_said = False
        self.thread_id = ring.thread_id
        self.anatomy = Anatomy(writer.ring, self.intern)
        self.roots: ModuleRoots | None = None  # torch_hooks.ModuleRoots, once torch is imported
        self.gpu: GpuTiming | None = None  # gpu_timing.GpuTiming, once torch is imported and has CUDA
        self.comm: CommTiming | None = None  # comm.CommTiming, once torch is imported and has torch.distributed
        self.dp: DataParallelTiming | None = None  # data_parallel.DataParallelTiming, once torch is imported
        self.mid_run = False  # loaded into a running job (mid_run.py): its first boundary starts step 1

    # -- ranges ---------------------------------------------------------------------------------

    def nvtx_push(self, name: str) -> None:
        dom = self._nvtx
        if dom is None:
            return
        attrs = self._nvtx_attrs.get(name)
        if attrs is None:
            attrs = self._nvtx_attrs[name] = dom.get_event_attributes(message=name)
        dom.push_range(attrs)

    def nvtx_pop(self) -> None:
        if self._nvtx is not None:
            self._nvtx.pop_range()

    def push(self, name: str) -> None:
        """Start a range on this thread (push_range-style APIs)."""
        nid = self.intern(str(name))
        open_ranges().append((nid, _now(), ring.depth_enter()))

    def unpush(self) -> None:
        """Forget the innermost pushed range without recording it (its push failed)."""
        stack = open_ranges()
        if stack:
            ring.set_depth(stack.pop()[2])

    def pop(self) -> None:
        """End the innermost range pushed on this thread; an unmatched pop is ignored."""
        t1 = _now()
        stack = open_ranges()
        if not stack:
            return
        nid, t0, depth = stack.pop()
        ring.set_depth(depth)
        self.emit(L.RANGE, depth, nid, ring.thread_id(), self.step_no, t0, t1, 0.0)

    # -- steps ----------------------------------------------------------------------------------

    def step(self, explicit: bool = True, optimizer: Any = None) -> None:
        """tuimon.step() (explicit), or an optimizer's step. Explicit calls win over optimizer
        steps; with several optimizers, the first one to step leads."""
        if explicit:
            return self.boundary(EXPLICIT)
        if self.source == EXPLICIT:
            return
        lead = self._lead_optimizer
        if lead is None:
            try:
                self._lead_optimizer = weakref.ref(optimizer)
            except TypeError:
                self._lead_optimizer = lambda o=optimizer: o
            self._say_optimizer(optimizer)
        elif lead() is not optimizer:
            return
        self.boundary(OPTIMIZER_STEP)

    def _say_optimizer(self, opt: Any) -> None:
        """Once: which optimizer leads and how it steps (the advice for a slow optimizer phase
        depends on it): 'optimizer:SGD foreach=False fused=False params=600' as a gauge's name."""
        try:
            params = [p for g in opt.param_groups for p in g["params"]]
            fused, foreach = opt.defaults.get("fused"), opt.defaults.get("foreach")
            if fused is None or foreach is None:  # torch's own choice when left to it
                from torch.optim.optimizer import _default_to_fused_or_foreach

                auto_fused, auto_foreach = _default_to_fused_or_foreach(params, False, False)
                fused = bool(fused) if fused is not None else auto_fused
                foreach = foreach if foreach is not None else auto_foreach
            desc = f"optimizer:{type(opt).__name__} foreach={bool(foreach)} fused={bool(fused)} params={len(params)}"
        except Exception:  # noqa: BLE001 - an optimizer of its own kind: said by name only
            desc = f"optimizer:{type(opt).__name__}"
        self.emit(L.GAUGE, 0, self.intern(desc), ring.thread_id(), self.step_no, 0, _now(), 1.0)

    def boundary(self, source: int, t1: int | None = None) -> None:
        """A step boundary from `source` at t1 (default now). A stronger source than the one
        counting takes over here: when it ends iterations and the old one started them, this closes
        the step the old one started (its first step); otherwise its steps start here (the job's
        first step runs from its first batch to its first step's end, whatever the source). So a loop
        counts each iteration once whichever sources it has (gradient accumulation: the optimizer's
        steps). A weaker source is ignored; a module call or backward that is not the first since
        the last batch is part of the same iteration (two models, or two backwards, per batch)."""
        t1 = _now() if t1 is None else t1
        if source < self.source:
            return
        a = self.anatomy
        if self.mid_run and not self.step_t0:  # loaded mid-run: what ran before this boundary is no whole step
            if source > self.source:
                self.source = source
                self._mark_source(source, 0)
            self.step_t0 = self.first_t0 = t1
            a.restart(t1)
            self._data_since_boundary = self.work_since_boundary = False
            return
        if source > self.source:
            old, self.source = self.source, source
            ends = old not in (NO_SOURCE, *_STARTS_ITERATION)
            if source in _STARTS_ITERATION or ends:
                # the new source's steps start here: the old one's stand for no iteration of it, but for
                # the first iteration where both end iterations (its step closed where the old one's did)
                self._mark_source(source, max(0, self.step_no - (2 if ends else 1)))
                if self.step_no > 1 or not self.step_t0:  # (the first step runs from the first batch on)
                    self.step_t0 = t1
                    a.restart(t1)
                    if self.step_no == 1:
                        self.first_t0 = t1
                self._data_since_boundary = self.work_since_boundary = False
                return
            self._mark_source(source, self.step_no - 1)  # (the step closed here is the first iteration)
        elif source in (FORWARD_CALL, BACKWARD_CALL) and self._data_seen and not self._data_since_boundary:
            return
        elif source == OPTIMIZER_STEP and self.work_seen and not (self.work_since_boundary or self._data_since_boundary):
            return  # (the optimizer stepped again in the same iteration)
        self._data_since_boundary = self.work_since_boundary = False
        t0 = self.step_t0 or self.created_ns
        step = self.step_no
        if step == 1 and not self.first_t0:
            self.first_t0 = t0
        if t1 - t0 > self.longest_ns and step > WARMUP_STEPS:
            self.longest_ns = t1 - t0
        if not a.on_loop():  # this thread steps: it is the loop
            a.reset(threading.get_ident())
        tid = ring.thread_id()
        syncs = a.close_step(step, t0, t1, tid)  # (and publishes the completed steps)
        comm = self.comm
        if comm is not None and (comm.reducing or comm.calls or comm.pending):  # (else nothing to close: no call)
            comm.close(step, t1, tid)
        if self.copies is not None:
            self.copies.close(step, t1, tid)
        dp = self.dp
        if dp is not None and (dp.active or dp.pending):  # (else nothing to close: no DataParallel this step)
            dp.close(step, t1, tid)
        self.step_no += 1
        self.step_t0 = t1
        gpu, ops = self.gpu, self.ops
        if gpu is not None and step >= gpu.due:  # (the sampled parts: called on the steps they need)
            gpu.boundary(step, t0, t1, syncs)
        if self.roots is not None and self.roots.discovering:
            self.roots.on_step(step)
        if graphs.open_captures:
            return  # (no op counted, no window opened or closed inside a CUDA-graph capture: probe/graphs.py)
        if ops is not None and (step >= ops.due or ops.mode is not None):
            ops.boundary(step, t0, t1)
        c = self.capturer
        if c is not None and (c.pending is not None or c.window is not None):  # (a capture asked for or open)
            c.on_step(step)

    def _mark_source(self, source: int, uncounted: int) -> None:
        """Say which source counts the steps from the step in progress on (the monitor leaves the
        steps of a weaker one out of its window), and how many of the steps numbered before it stand
        for no iteration of its (a sanity check's model calls before the first optimizer.step(), an
        accumulating loop's first backward() calls): the monitor leaves them out of the count."""
        t, tid = _now(), ring.thread_id()
        self.emit(L.GAUGE, 0, self.intern("step.uncounted"), tid, self.step_no, 0, t, float(uncounted))
        self.emit(L.GAUGE, 0, self.intern("step.source"), tid, self.step_no, 0, t, float(source))

    def finish(self) -> None:
        """At the job's exit: a loop whose steps start at its model calls (no optimizer, backward or
        tuimon.step()) ends its last step where the loop last moved (its last model call, or a sync
        after it): no later call closes it, and what follows the loop is not its step."""
        a = self.anatomy
        if self.source == FORWARD_CALL and self.step_t0 and a.t > self.step_t0 and a.on_loop():
            self._data_since_boundary = True  # (a DataLoader's batch came before that call)
            self.boundary(FORWARD_CALL, a.t)

    def data_start(self, t0: int, workers: int | None = None) -> None:
        """The loop asks a DataLoader for a batch (workers: the loader's worker count, said once
        per iterator); it ends with anatomy.data_wait(DATA, t0, t1) (one C call where built)."""
        a = self.anatomy
        if a.on_loop():
            if self.source <= DATALOADER:
                self.boundary(DATALOADER, t0)
            self._data_seen = self._data_since_boundary = True
        a.enter(DATA, t0)
        if workers is not None:
            self.emit(L.GAUGE, 0, self.intern("dataloader.workers"), ring.thread_id(), self.step_no, 0, t0,
                      float(workers))


    def synced(self, t0: int, t1: int, timed: bool = False) -> None:
        """The loop thread was blocked t0..t1 waiting for the GPU (a device-to-host sync); timed:
        inside the sync phase, entered and left around it. (torch_hooks._waiting does this inline.)"""
        self.anatomy.sync(t0, t1, sys._getframe(1), timed)
        if self.gpu is not None and not self.gpu.anchored:
            self.gpu.after_sync()

    def sample_gauges(self) -> None:
        """What the control thread reads ~every 0.5 s: the GPU memory gauges and DDP's own timing."""
        if graphs.open_captures:
            return  # (no allocator or DDP read while a CUDA graph is captured: probe/graphs.py)
        if self.comm is not None:
            self.comm.sample_ddp(self.step_no)
        self.sample_memory()

    def sample_memory(self) -> None:
        """The caching allocator's numbers for the loop's GPU, as gauges. Called by the control
        thread (~every 0.5 s: torch.cuda.memory_stats() costs ~90 us), never by the loop."""
        torch = sys.modules.get("torch")
        gpu = self.gpu
        if torch is None or gpu is None or gpu.device is None or not torch.cuda.is_initialized():
            return
        stats = torch.cuda.memory_stats(gpu.device)
        t, tid = _now(), ring.thread_id()
        for name, key in MEMORY_STATS:
            v = stats.get(key)
            if isinstance(v, int):
                self.emit(L.GAUGE, 0, self.intern(name), tid, self.step_no, 0, t, float(v))
        for name, v in _memory_limits(torch, gpu.device):
            self.emit(L.GAUGE, 0, self.intern(name), tid, self.step_no, 0, t, float(v))

    def say(self, text: str) -> None:
        """Tell the monitor something went wrong in the probe (a part of it stopped): a gauge named
        layout.NOTE_PREFIX + text, in the channel, never the job's own stderr or stdout: nothing of
        tuimon's reaches the job's output (issue 43 item 23). Never raises."""
        try:
            self.emit(L.GAUGE, 0, self.intern(L.NOTE_PREFIX + text), ring.thread_id(), self.step_no, 0, _now(), 1.0)
        except Exception:  # noqa: BLE001 - nothing more to tell it with
            pass

    def count(self, name: str, n: float) -> None:
        t = _now()
        try:
            value, label = float(n), str(name)
        except Exception as e:  # noqa: BLE001 - a bad count is dropped, never raised into the loop
            if not self._bad_count_said:
                self._bad_count_said = True
                self.say(f"count() ignored (said once): {type(e).__name__}: {e}")
            return
        self.emit(L.COUNT, ring.depth(), self.intern(label), ring.thread_id(), self.step_no, t, t, value)
