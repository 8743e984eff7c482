"""summary's step times, data-wait share, breakdown and range table over the window, worked out
only when the window changed, and then kept as steps enter and leave it where few of its steps are
new (a job of long steps: a step or two a cycle); where most are (the demo's 10-20 ms steps: the
whole window in a second), summary's functions over it cost less than folding each step in and out.
A step counts as new again when its records changed (StepRecord.rev, bumped by StepAccumulator.add:
GPU values come a few steps late). Every sum kept is of integer ns, so exact in any order: the
results are summary's own (tests/test_rolling.py checks them over random windows)."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Collection
from typing import NamedTuple, TypeVar

from ..model import RangeRow, StepTimes
from . import summary
from .steps import StepRecord
from .summary import percentile

FEW = 8  # samples added or removed one by one below this many, else the list is merged or rebuilt
T = TypeVar("T")
MOSTLY_NEW = 5  # more than 1/MOSTLY_NEW of the window's steps new: summary's functions over it (see above)


class _Range(NamedTuple):  # one range name's part of one step
    nid: int
    n: int
    ns: int
    depth: int  # (as range_table reads it: 0 where the step has none)
    top: bool  # at depth 0 (as breakdown reads it)
    samples: tuple[int, ...]


class _Part(NamedTuple):  # what one step added, to take out again as it was
    rev: int
    duration: int
    wait: int
    ranges: tuple[_Range, ...]


def _part(s: StepRecord) -> _Part:
    depth = s.depth
    return _Part(s.rev, s.duration_ns, s.data_wait_ns,
                 tuple(_Range(nid, s.range_n[nid], s.range_ns[nid], depth.get(nid, 0), depth.get(nid) == 0, tuple(ds))
                       for nid, ds in s.ranges.items()))


class RollingWindow:
    """update(steps) with each cycle's window (StepAccumulator.window), then ask for its numbers.
    Its numbers are kept until the window changes (a name id's name never changes: name_of too)."""

    def __init__(self) -> None:
        self.steps: list[StepRecord] = []
        self._revs: dict[int, tuple[StepRecord, int]] = {}  # step index -> (the step, its rev then)
        self._said: dict[str, object] = {}  # what the methods said about this window
        self._folded = False  # the sums below hold the window (else summary's functions are asked)
        self._reset()

    def _reset(self) -> None:
        self._parts: dict[int, _Part] = {}  # step index -> what it added
        self.total_ns = 0
        self.wait_ns = 0
        self._durations: list[int] = []  # sorted
        self._n: dict[int, int] = {}  # name id -> ranges
        self._ns: dict[int, int] = {}  # name id -> their time
        self._samples: dict[int, list[int]] = {}  # name id -> durations, sorted
        self._depths: dict[int, dict[int, int]] = {}  # name id -> depth -> steps
        self._top: dict[int, list[int]] = {}  # name id -> [ns, steps] of the steps where it is at depth 0

    def update(self, steps: list[StepRecord]) -> None:
        prev = self._revs
        new = [s for s in steps if (had := prev.get(s.index)) is None or had[0] is not s or had[1] != s.rev]
        if not new and len(steps) == len(prev):
            self.steps = steps
            return  # (the same steps as they were: what was said holds)
        self._said = {}
        self._revs = {s.index: (s, s.rev) for s in steps}
        self.steps = steps
        if len(new) * MOSTLY_NEW > len(steps) or len(self._revs) != len(steps):  # (or an index twice: not folded)
            if self._folded:
                self._reset()
                self._folded = False
            return
        if not self._folded:
            self._reset()
            new, prev = steps, {}
            self._folded = True
        parts = self._parts
        for gone in prev.keys() - self._revs.keys():
            self._take(parts.pop(gone))
        for s in new:
            was = parts.get(s.index)
            if was is not None:
                self._take(was)
            part = parts[s.index] = _part(s)
            self._add(part)

    def _add(self, p: _Part) -> None:
        self.total_ns += p.duration
        self.wait_ns += p.wait
        insort(self._durations, p.duration)
        for r in p.ranges:
            nid = r.nid
            self._n[nid] = self._n.get(nid, 0) + r.n
            self._ns[nid] = self._ns.get(nid, 0) + r.ns
            depths = self._depths.setdefault(nid, {})
            depths[r.depth] = depths.get(r.depth, 0) + 1
            samples = self._samples.setdefault(nid, [])
            if len(r.samples) < FEW:
                for d in r.samples:
                    insort(samples, d)
            else:
                samples.extend(r.samples)
                samples.sort()  # (two sorted runs: a merge)
            if r.top:
                top = self._top.setdefault(nid, [0, 0])
                top[0] += r.ns
                top[1] += 1

    def _take(self, p: _Part) -> None:
        self.total_ns -= p.duration
        self.wait_ns -= p.wait
        _remove(self._durations, (p.duration,))
        for r in p.ranges:
            nid = r.nid
            depths = self._depths[nid]
            depths[r.depth] -= 1
            if not depths[r.depth]:
                del depths[r.depth]
            if not depths:  # (its last step left)
                for table in (self._n, self._ns, self._samples, self._depths):
                    del table[nid]
            else:
                self._n[nid] -= r.n
                self._ns[nid] -= r.ns
                _remove(self._samples[nid], r.samples)
            if r.top:
                top = self._top[nid]
                top[0] -= r.ns
                top[1] -= 1
                if not top[1]:
                    del self._top[nid]

    def _first_seen(self, ids: Collection[int], top: bool) -> list[int]:
        """ids in the order summary's dicts get them: by the first step (oldest first) that has
        them, then by their order in that step."""
        order: dict[int, None] = {}
        if not ids:
            return []
        for s in self.steps:
            for nid in s.ranges:
                if nid in ids and nid not in order and (not top or s.depth.get(nid) == 0):
                    order[nid] = None
            if len(order) == len(ids):
                break
        return list(order)

    # -- summary's functions, on the window of the last update --------------------------------------

    def said(self, what: str, work: Callable[[], T]) -> T:
        """work()'s answer about this window, worked out once until the window changes (a list or
        dict comes as a copy: the caller's own)."""
        if what not in self._said:
            self._said[what] = work()
        got = self._said[what]
        return type(got)(got) if isinstance(got, list | dict) else got  # type: ignore[return-value]

    def _say(self, what: str, folded: Callable[[], T], unfolded: Callable[[], T]) -> T:
        return self.said(what, folded if self._folded else unfolded)

    def step_time_ms(self) -> StepTimes | None:
        return self._say("step_time_ms", self._step_time_ms, lambda: summary.step_time_ms(self.steps))

    def data_wait_share(self) -> float | None:
        return self._say("data_wait_share", self._data_wait_share, lambda: summary.data_wait_share(self.steps))

    def breakdown(self, name_of: Callable[[int], str]) -> dict | None:
        return self._say("breakdown", lambda: self._breakdown(name_of), lambda: summary.breakdown(self.steps, name_of))

    def range_table(self, name_of: Callable[[int], str]) -> list[RangeRow]:
        return self._say("range_table", lambda: self._range_table(name_of),
                         lambda: summary.range_table(self.steps, name_of))

    def _step_time_ms(self) -> StepTimes | None:
        if not self.steps:
            return None
        ms = [d / 1e6 for d in self._durations]  # (the same as sorting the quotients: division keeps the order)
        return StepTimes(
            p50=round(percentile(ms, 50), 3),
            p95=round(percentile(ms, 95), 3),
            p99=round(percentile(ms, 99), 3),
            mean=round(sum(ms) / len(ms), 3),
            last=round(self.steps[-1].duration_ns / 1e6, 3),
        )

    def _data_wait_share(self) -> float | None:
        if self.total_ns <= 0:
            return None
        return min(1.0, self.wait_ns / self.total_ns)

    def _breakdown(self, name_of: Callable[[int], str]) -> dict | None:
        total = self.total_ns
        if total <= 0:
            return None
        top = self._first_seen(self._top, top=True)
        parts = {"data_wait": self.wait_ns / total}
        for nid in sorted(top, key=lambda k: -self._top[k][0]):
            parts[name_of(nid)] = self._top[nid][0] / total
        parts["unaccounted"] = max(0.0, 1.0 - sum(parts.values()))
        return {k: round(v, 4) for k, v in parts.items()}

    def _range_table(self, name_of: Callable[[int], str]) -> list[RangeRow]:
        total = self.total_ns
        rows = [RangeRow(
            name=name_of(nid),
            count=self._n[nid],
            mean_ms=round(self._ns[nid] / self._n[nid] / 1e6, 3),
            p95_ms=round(percentile(self._samples[nid], 95) / 1e6, 3),
            share=round(self._ns[nid] / total, 4) if total > 0 else None,
            depth=min(self._depths[nid]),
        ) for nid in self._first_seen(self._n, top=False)]
        rows.sort(key=lambda r: -(r.share or 0))
        return rows


def _remove(sorted_list: list[int], values: tuple[int, ...]) -> None:
    """Take values (each there) out of a sorted list."""
    if len(values) < FEW:
        for v in values:
            del sorted_list[bisect_left(sorted_list, v)]
        return
    gone: dict[int, int] = {}
    for v in values:
        gone[v] = gone.get(v, 0) + 1
    kept = []
    for v in sorted_list:
        if gone.get(v):
            gone[v] -= 1
        else:
            kept.append(v)
    sorted_list[:] = kept
