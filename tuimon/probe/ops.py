"""How many ops a step launches, counted with no capture: one step in `every` runs under a
TorchDispatchMode that counts the aten ops it dispatches (on the loop thread, and on autograd's
threads, which inherit the mode), by phase, and the lines of the job's code that issue them (the
loop thread's, in that step). Counting costs the counted step ~2-16 us an op (this machine's CPU),
so `every` follows what it cost: the counted step's excess over the usual step, divided by what one
count may cost on average (COST_SHARE of a step), so the counting costs at most that share.

Never while anything of the job is compiled (torch.compile guards on the dispatch modes: a mode
would recompile its graphs), and never before torch._dynamo is imported (the mode imports it: a
second's stall; every job that steps an optimizer has it), and never inside a profile (a capture
window of tuimon's, or the job's own torch.profiler: the mode would be its top host operator). The counts go to the ring as gauges:
ops.count, ops.phase.<phase>, ops.line:<line> (the latest counted step's; the gauge's step says which)."""

from __future__ import annotations

import sys
import threading
from time import monotonic_ns as _now
from typing import TYPE_CHECKING, Any

from ..channel import layout as L
from ..channel import ring
from .anatomy import PHASES

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import FrameType

    from .core import Probe

FIRST = 20  # the first counted step (after warm-up)
COST_SHARE = 0.001  # of the step time, what counting may cost on average: 0.1% of the probe's 1% in all (as the
# GPU timing's events, gpu_timing.py; at 0.2% and 0.25% the two sampled parts took nearly half a point)
EVERY_MIN, EVERY_MAX = 20, 100_000
LINES = 8  # lines named per count


def smoothed(mean: float | None, last: tuple[int, int] | None, step: int, t0: int, t1: int) -> float:
    """A step time's running mean, folding in the steps since the last call (last: its step and end
    time) as a mean that decays 0.9 a step: what calling on every step would give, called on fewer
    (gpu_timing.py uses it too)."""
    n: int
    x: float
    if last is None or step <= last[0]:
        n, x = 1, t1 - t0
    else:
        n, x = step - last[0], (t1 - last[1]) / (step - last[0])
    return float(x) if not mean else mean + (1 - 0.9 ** n) * (x - mean)


def profiled(capturer: Any) -> bool:
    """Is a profile being taken, or about to be: a capture window of tuimon's asked for, open or
    being written, or any torch.profiler session of the job's own. The op counter's dispatch mode
    shows in a profile as the top host operator ("PythonDispatchMode"): tuimon's instrumentation in
    the user's profile, so no step is counted then (issue 43 item 18)."""
    if capturer is not None and (capturer.pending is not None or capturer.window is not None or capturer.finishing):
        return True
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.autograd.profiler._is_profiler_enabled or torch._C._autograd._profiler_enabled())
    except Exception:  # noqa: BLE001 - a torch without these: tuimon's own windows are still known
        return False


class OpCounter:
    def __init__(self, probe: Probe, line_of: Callable[[FrameType], str]) -> None:
        """line_of(frame) -> the name of the innermost line of the job's own code (sampler.LineNames)."""
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class Count(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                counter.count()
                return func(*args, **(kwargs or {}))

        self.probe, self._line_of, self._mode_cls = probe, line_of, Count
        self.every = FIRST
        self.due = FIRST  # the next step to count: the probe calls boundary() from this step's end on
        self._called: tuple[int, int] | None = None  # (step, host ns) at the last call
        self.mode: Any = None  # the Count dispatch mode while a step is counted (torch's, made at run time)
        self.usual_ns = 0.0  # the usual step (a running mean of uncounted ones)
        self.off: str | None = None  # why counting stopped for good
        self._reset()

    def _reset(self) -> None:
        self.total = 0
        self.by_phase = [0] * len(PHASES)
        self.by_line: dict[str, int] = {}

    def count(self) -> None:
        p = self.probe
        a = p.anatomy
        self.total += 1
        top = a.top
        if 0 <= top < len(self.by_phase):
            self.by_phase[top] += 1
        if threading.get_ident() == a.loop:
            line = self._line_of(sys._getframe(2))
            self.by_line[line] = self.by_line.get(line, 0) + 1

    def boundary(self, step: int, t0: int, t1: int) -> None:
        """After the probe closed step `step` (t0..t1): end a counted step, or start the next one.
        The probe calls it while a step is counted and from step `due` on (not on the steps between,
        whose mean since the last call is the usual step)."""
        if self.mode is not None:
            self._close(step, t1 - t0)
            self._called = (step, t1)
            return
        if self.off is not None:
            self.due = 1 << 62
            return
        self.usual_ns = smoothed(self.usual_ns, self._called, step, t0, t1)
        self._called = (step, t1)
        if step < self.due:
            return
        if "torch._dynamo" not in sys.modules:
            self.due = step + EVERY_MIN  # (asked again then)
            return
        if getattr(self.probe.roots, "compiled_seen", False):
            self.off = "the job compiles (torch.compile guards on dispatch modes)"
            return
        c = self.probe.capturer
        lock = c.lock if c is not None else None
        if lock is not None and not lock.acquire(blocking=False):  # (the control thread is opening a window)
            self.due = step + 1
            return
        try:
            if profiled(c):  # never inside a profile: the mode would be in it, as its top host operator
                self.due = step + EVERY_MIN
                return
            self._reset()
            try:
                self.mode = self._mode_cls()
                self.mode.__enter__()
            except Exception as e:  # noqa: BLE001 - no count then, said once
                self.mode, self.off = None, f"{type(e).__name__}: {e}"
        finally:
            if lock is not None:
                lock.release()

    def _close(self, step: int, d_ns: int) -> None:
        mode, self.mode = self.mode, None
        try:
            mode.__exit__(None, None, None)
        except Exception as e:  # noqa: BLE001 - the mode stack is not ours any more: stop counting
            self.off = f"{type(e).__name__}: {e}"
            return
        p, t = self.probe, _now()
        emit, tid, intern = p.emit, ring.thread_id(), p.intern
        emit(L.GAUGE, 0, intern("ops.count"), tid, step, 0, t, float(self.total))
        for k, n in enumerate(self.by_phase):
            if n:
                emit(L.GAUGE, 0, intern(f"ops.phase.{PHASES[k]}"), tid, step, 0, t, float(n))
        for line, n in sorted(self.by_line.items(), key=lambda kv: -kv[1])[:LINES]:
            emit(L.GAUGE, 0, intern(f"ops.line:{line}"), tid, step, 0, t, float(n))
        cost = max(0.0, d_ns - self.usual_ns)
        budget = COST_SHARE * max(self.usual_ns, 1.0)
        self.every = int(min(EVERY_MAX, max(EVERY_MIN, cost / budget)))
        self.due = step + self.every

    def abandon(self) -> None:
        """Leave a counted step without counting it (the probe switched off, a forked child)."""
        mode, self.mode = self.mode, None
        try:
            mode.__exit__(None, None, None)
        except Exception:  # noqa: BLE001
            self.off = "its dispatch mode could not be left"
        self.due = (self._called[0] if self._called else 0) + self.every
