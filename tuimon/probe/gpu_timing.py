"""GPU time per step from CUDA events, without ever waiting on the GPU.

An event is recorded on the current stream at each step boundary, at the end of the step's
outermost forward and backward (where queued work is likely), and right after the first
device-to-host sync of a step (an anchor: the host just waited for the stream to drain, so the
GPU has nothing queued at that moment). Events are resolved later with query(); a pending event
is never waited for. From two consecutive resolved events, recorded at host times h0, h1 and
completed dt apart on the GPU, the GPU's lag behind the host changes by dt - (h1 - h0): how far
the queue grew or drained in between. The lag is pinned to 0 at anchors and never below 0 (at
an idle moment it must be 0), so it is exact from the first idle moment on.

Per step (emitted once its end event has completed):
- gpu.step_ns: GPU time between its two boundary events (the GPU side of the step);
- gpu.lag_ns: how much queued work the GPU still had when the host finished the step (0: the
  GPU was waiting for the host; large: the host runs ahead of a busy GPU);
- gpu.busy_ns: a lower bound on the time the GPU had work during the step: the union of each
  event's [host time, host time + lag] and of the step's syncs (while the host waits on a sync,
  the GPU is busy by definition). Idle gaps between events count as idle, so tiny kernels the GPU
  keeps up with are not seen here; GPM's SM activity, sampled by the monitor, covers those.

Cost: ~4 us a record the way _record makes it (Event.record() ~11 us, H200) and ~1-2 us a query, but
measured in a 2-GPU DDP job the events cost ~1% of its 4.6 ms step when every 4th step was measured (~45 us per
step: benchmarks/ddp_step_overhead.py's probe vs probe-nogpu arms, two H200s: ~180 us a measured
step). So steps are measured about once per MIN_STEP_NS (160 ms): every step from 160 ms up, every
n-th below, which keeps the events near 0.1% of step time by that measurement (at 80 ms they took
~0.25% of the probe's 1% budget; at 160 ms a 10 ms step is still measured 6 times a second, more
than a monitor's 1 Hz frame needs). Each record asks for the current stream in one C call
(current_stream below)."""

from __future__ import annotations

from collections import deque
from time import monotonic_ns as _now
from typing import Any

from ..channel import layout as L
from . import graphs
from .ops import smoothed

MIN_STEP_NS = 160_000_000  # events on every step from 160 ms steps up; shorter steps are sampled (the docstring)
MARKS = 2  # mid-step events a measured step may add (end of forward, end of backward)
POOL = 64


def stride(step_ns: float) -> int:
    """Events on every n-th step: every step from MIN_STEP_NS up, about one per MIN_STEP_NS below."""
    return 1 if step_ns >= MIN_STEP_NS else max(2, min(100, int(MIN_STEP_NS // max(step_ns, 1))))


class GpuTiming:
    def __init__(self, torch: Any, emit: Any, intern: Any, tid_of_record: Any) -> None:
        self.cuda = torch.cuda
        self._emit, self._intern, self._tid = emit, intern, tid_of_record
        self._free: list = []
        self._pending: deque = deque()  # (event, host ns, step it ends or None, anchor?)
        self._last: tuple | None = None  # (event, host ns, lag) of the last resolved event
        self._points: deque = deque(maxlen=256)  # resolved (host ns, lag ns), oldest first
        self._bounds: dict[int, tuple[int, int]] = {}  # step -> (host ns, lag) of its end event
        self._open: dict[int, tuple] = {}  # step -> (start, end, syncs) awaiting its end event
        self._names: dict[str, int] = {}
        self.every = 1
        self._step_ns: float | None = None  # smoothed step time
        self.measuring = True  # the step under way is measured (probe/comm.py's event pairs go on these too)
        self.anchored = False  # True once this step has its anchor (or is not measured)
        self._marks = 0
        self.device: int | None = None
        self._ready = False  # CUDA initialized
        self.due = 0  # the next step whose end needs boundary() (0: every step, until CUDA is initialized)
        self._called: tuple[int, int] | None = None  # (step, host ns) at the last boundary()
        self._stream = current_stream(torch)
        base = getattr(getattr(torch, "_C", None), "_CudaEventBase", None)  # (Event.record, less its frame)
        self._record_on = base.record if base is not None and isinstance(torch.cuda.Event, type) \
            and issubclass(torch.cuda.Event, base) else _record

    def _record(self) -> Any:
        if self._free:
            ev = self._free.pop()
        elif len(self._pending) < POOL:
            ev = self.cuda.Event(enable_timing=True)
        else:
            return None  # the GPU is far behind: skip rather than pile up events
        self._record_on(ev, self._stream())
        return ev

    def record_on(self, ev: Any) -> None:
        """Record ev on the current stream (comm.py's event pairs): Event.record() made cheaper."""
        self._record_on(ev, self._stream())

    def boundary(self, step: int, t0: int, t1: int, syncs: list) -> None:
        """Step `step` ran t0..t1 on the host, with these syncs; called at its end, on the loop thread,
        from step `due` on: the step before a measured one and the measured one (the steps between
        need nothing: the stride's step time is their mean since the last call)."""
        if not self._ready:
            if not self.cuda.is_initialized():
                return
            self._ready = True  # (CUDA stays initialized; a forked child has no probe: state.probe is None)
        if graphs.capturing(self.cuda):
            return  # (called again at the next step's end: `due` stays)
        if self._pending:
            self.resolve()
        if step % self.every == 0 or (step + 1) % self.every == 0:  # a measured step needs both ends
            ev = self._record()
            if ev is not None:
                self._pending.append((ev, _now(), step, False))
                if step % self.every == 0:
                    self._open[step] = (t0, t1, list(syncs))
        # the stride follows a smoothed step time, the mean since the last call: loops whose steps
        # alternate short and long (two DataLoader workers deliver batches in pairs) would otherwise
        # measure a biased subset
        self._step_ns = smoothed(self._step_ns, self._called, step, t0, t1)
        self._called = (step, t1)
        self.every = stride(self._step_ns)
        self.measuring = (step + 1) % self.every == 0  # marks and anchors only in a measured step
        self.anchored, self._marks = not self.measuring, 0
        self.due = step + 1 if self.measuring else (step // self.every + 1) * self.every - 1
        self.device = self.cuda.current_device()

    def mark(self) -> None:
        """A point inside a measured step where queued work is likely (the end of forward, of
        backward): its lag shows how long the GPU stays busy from there. Two a step at most."""
        if self.measuring and self._marks < MARKS and self.cuda.is_initialized() and not graphs.capturing(self.cuda):
            self._marks += 1
            ev = self._record()
            if ev is not None:
                self._pending.append((ev, _now(), None, False))

    def after_sync(self) -> None:
        """The loop thread just came back from a device-to-host sync: one anchor per step."""
        if not self.anchored and self.cuda.is_initialized() and not graphs.capturing(self.cuda):
            self.anchored = True
            ev = self._record()
            if ev is not None:
                self._pending.append((ev, _now(), None, True))

    def resolve(self) -> None:
        """Fold in the events the GPU has completed, oldest first; never waits."""
        while self._pending:
            ev, host, step, anchor = self._pending[0]
            if not ev.query():
                return
            self._pending.popleft()
            if self._last is None:
                lag = 0  # the first event: taken as an idle moment
            else:
                prev, prev_host, prev_lag = self._last
                gpu_ns = int(prev.elapsed_time(ev) * 1e6)
                lag = max(0, prev_lag + gpu_ns - (host - prev_host))
                self._free.append(prev)
            if anchor:
                lag = 0  # the stream had just drained
            self._last = (ev, host, lag)
            self._points.append((host, lag))
            if step is not None:
                self._bounds[step] = (host, lag)
                if step in self._open:
                    self._finish(step, *self._open.pop(step))
        if len(self._bounds) > 3:
            newest = max(self._bounds)
            for old in [s for s in self._bounds if s < newest - 2]:
                del self._bounds[old]

    def _finish(self, step: int, start: int, end: int, syncs: list) -> None:
        host, lag = self._bounds[step]
        spans = syncs  # (the step's own copy, made in boundary())
        for h, lag_ in reversed(self._points):  # (newest first: the step's own points are the last few)
            if h < start:
                break
            if h <= host and lag_ > 0:
                spans.append((h, h + lag_))
        tid, emit = self._tid(), self._emit
        emit(L.STEP_VALUE, 0, self._name("gpu.lag_ns"), tid, step, 0, end, float(lag))
        emit(L.STEP_VALUE, 0, self._name("gpu.busy_ns"), tid, step, 0, end, float(_covered(spans, start, end)))
        before = self._bounds.get(step - 1)
        if before is not None:  # the GPU side of the step: from its start event to its end event
            gpu = (host + lag) - (before[0] + before[1])
            emit(L.STEP_VALUE, 0, self._name("gpu.step_ns"), tid, step, 0, end, float(max(0, gpu)))

    def _name(self, name: str) -> int:
        nid = self._names.get(name)
        if nid is None:
            nid = self._names[name] = self._intern(name)
        return nid


def _record(ev: Any, stream: Any) -> None:
    ev.record(stream)


def current_stream(torch: Any) -> Any:
    """torch.cuda.current_stream() for the events, made cheaper: torch builds a new Stream object in
    five Python calls each time (8.6 us on an H200, of Event.record()'s 11.0); here the current
    stream's numbers come from one C call and its Stream is made once (0.7 us; a record 3.9)."""
    raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentStream", None)
    if raw is None:
        return torch.cuda.current_stream
    made: dict[tuple, object] = {}
    device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)  # (used once CUDA is initialized)
    stream = torch.cuda.Stream

    def current() -> Any:
        key = raw(device())
        s = made.get(key)
        if s is None:
            if len(made) > 256:  # (a job that makes streams without end)
                made.clear()
            s = made[key] = stream(stream_id=key[0], device_index=key[1], device_type=key[2])
        return s

    return current


def _covered(spans: list[tuple[int, int]], start: int, end: int) -> int:
    """How much of start..end the spans cover together."""
    total, reach = 0, start
    for a, b in sorted(spans):
        a, b = max(a, reach), min(b, end)
        if b > a:
            total += b - a
            reach = b
    return total
