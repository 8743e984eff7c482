"""What a capture window cost the job, judged from the job's own step times (the channel's STEP
records), not from the probe's timers: the steps from the window's first to just past the moment
its work ended (its trace written: the state turned done), against the normal steps before it.

The budget (docs/DESIGN.md): a window of any kind costs the job at most 1.2x its worst normal step,
after a one-time set-up."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from ..channel import layout as L
from ..channel.text import count
from ..model import WindowCost

BUDGET = 1.2  # the worst step of a window's / the worst normal step (docs/DESIGN.md, performance budgets)
# The steps before the window it is judged against: 50, or as many as the window's judged steps where
# those are more (a short-step loop's window runs until its trace is written: ~600 steps of a 2 ms loop).
# The worst of n steps grows with n; judged against the worst of fewer, a window with no cost at all reads
# as several times over (the ~1,500-op loop on a 2-core machine, no window asked: 1.06-10.65x, median 6.3x
# against the 50 before; docs/measurements.md). The 50 before are always among them. Steps before the log's
# oldest count as missing; a window taken within that many steps of another, or of the job's start, counts
# those steps as normal ones (it reads cheaper than it was).
NORMAL_STEPS = 50
MIN_NORMAL_STEPS = 5
AFTER_STEPS = 1  # past the step in which the window's work ended: the last of it may land there


class StepLog:
    """The last `keep` steps' (index, t0, t1), from STEP records (any order; a step once)."""

    def __init__(self, keep: int = 4096):
        self.steps: deque[tuple[int, int, int]] = deque(maxlen=keep)
        self._last = 0

    def add(self, records: Iterable[tuple]) -> None:
        for r in records:
            if r[0] == L.STEP and r[5] > self._last:
                self.steps.append((r[5], r[6], r[7]))
                self._last = r[5]

    def add_steps(self, steps: Iterable[tuple[int, int, int]]) -> None:
        for s in steps:
            if s[0] > self._last:
                self.steps.append(s)
                self._last = s[0]


def window_cost(steps: Iterable[tuple[int, int, int]], first: int, last: int, done_ns: int) -> WindowCost | None:
    """The cost of the window over steps first..last whose work ended at done_ns (CLOCK_MONOTONIC
    ns, as the steps), or None while the steps after it are not all in (or too few normal steps
    before it are known). steps: (index, t0, t1)."""
    by_index = {i: (t0, t1) for i, t0, t1 in steps if t1 > t0}
    normal = [(s[1] - s[0]) / 1e6 for i in range(first - NORMAL_STEPS, first) if (s := by_index.get(i))]
    if len(normal) < MIN_NORMAL_STEPS or not by_index:
        return None
    newest = max(by_index)
    judged: list[tuple[int, float]] = []
    ended_at = None  # the step in which the window's work ended
    i = first
    while ended_at is None or i <= ended_at + AFTER_STEPS:
        s = by_index.get(i)
        if s is None:
            if i < newest:  # (a step lost to the ring: skip it)
                i += 1
                continue
            return None  # not in yet
        judged.append((i, (s[1] - s[0]) / 1e6))
        if ended_at is None and i >= last and s[1] >= done_ns:
            ended_at = i
        i += 1
    if len(judged) > NORMAL_STEPS:  # the worst of as many normal steps as judged (NORMAL_STEPS says why)
        normal = [(s[1] - s[0]) / 1e6 for i in range(first - len(judged), first) if (s := by_index.get(i))]
    worst_normal = max(normal)
    typical = sorted(normal)[len(normal) // 2]
    worst_step, worst = max(judged, key=lambda x: x[1])
    # A loop whose steps vary (a DataLoader's waits) loses time beyond its typical step without any window:
    # the normal steps' mean excess, for as many steps as were judged, is that part of lost_ms.
    normal_excess = sum(max(0.0, d - typical) for d in normal) / len(normal)
    return WindowCost(normal_steps=len(normal), worst_normal_ms=round(worst_normal, 3), typical_ms=round(typical, 3),
                      window_steps=max(0, last - first + 1), steps=len(judged), worst_ms=round(worst, 3),
                      worst_step=worst_step, over=sum(1 for _, d in judged if d > BUDGET * worst_normal),
                      ratio=round(worst / worst_normal, 3), lost_ms=round(sum(max(0.0, d - typical) for _, d in judged), 3),
                      normal_lost_ms=round(normal_excess * len(judged), 3))


def describe(c: WindowCost) -> str:
    """'the window cost the job one step of 64 ms, 2.1x its worst (30 ms, 50 steps before it);
    0.41 s lost'."""
    before = f"{_ms(c.worst_normal_ms)} in the {count(c.normal_steps, 'step')} before it"
    lost = f"{_seconds(c.lost_ms)} lost"
    if c.normal_lost_ms >= 0.5:
        lost += f" ({_seconds(c.normal_lost_ms)} of it as many normal steps lose)"
    if c.over == 0:
        return f"within budget: its worst step {_ms(c.worst_ms)}, {c.ratio:.2f}x the worst before it ({before}); {lost}"
    what = f"one step of {_ms(c.worst_ms)}" if c.over == 1 else f"{c.over} steps over budget, up to {_ms(c.worst_ms)}"
    return f"the window cost the job {what}, {c.ratio:.1f}x its worst ({before}; budget {BUDGET}x); {lost}"


def expected_pause(c: WindowCost, steps: int) -> str | None:
    """What a window of `steps` steps will cost this job, from a window it took before, when that
    one was over budget: 'a window of 10 steps will pause this job ~1.2 s (2.9x its worst step last
    time)'. The cost grows with the events recorded, so with the steps captured. A window over
    budget that lost no more time than as many normal steps lose (a jittery loop) announces no
    pause: what it did to its steps is said instead."""
    if c.ratio <= BUDGET or c.window_steps <= 0:
        return None
    if c.lost_ms <= c.normal_lost_ms:
        slowed = "a step" if c.over <= 1 else f"{c.over} steps"
        return (f"a window of {count(steps, 'step')} may slow {slowed} of this job (last time up to {_ms(c.worst_ms)}, "
                f"{c.ratio:.1f}x its worst step; no more time lost than its normal steps lose)")
    pause = (c.lost_ms - c.normal_lost_ms) * steps / c.window_steps
    said = f"~{_seconds(pause)}" if pause >= 1 else "under 1 ms"
    return f"a window of {count(steps, 'step')} will pause this job {said} ({c.ratio:.1f}x its worst step last time)"


def _ms(ms: float) -> str:
    return f"{ms:.0f} ms" if ms >= 100 else f"{ms:.3g} ms"


def _seconds(ms: float) -> str:
    return f"{ms / 1e3:.2g} s" if ms >= 1000 else f"{ms:.0f} ms"
