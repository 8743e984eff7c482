"""Steps and where their time goes, built from channel records. Pure: no I/O, no clocks."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

# Record kinds and field positions: a copy of tuimon.channel.layout's, so this layer stays
# stdlib-only (a test checks they agree).
RANGE, STEP, DATA_WAIT, COUNT, PHASE, STEP_VALUE, GAUGE, SITE, HOT = 1, 2, 3, 4, 5, 6, 7, 8, 9
F_KIND, F_DEPTH, F_NAME, F_TID, F_STEP, F_T0, F_T1, F_VALUE = 0, 1, 3, 4, 5, 6, 7, 8


# Per step and range name, durations kept for percentiles; counts and totals stay exact beyond
# it. Bounds the monitor's memory for loops with huge numbers of ranges per step, or no steps.
RANGE_SAMPLES = 1024
HOT_RECORDS = 20_000  # the sampler's records kept at most (the monitor forgets those older than it shows: forget_hot)
GAUGE_HISTORY = 512  # a gauge's last values kept (the memory gauges: ~4 minutes at one read per 0.5 s)


@dataclass
class StepRecord:
    index: int
    t0: int = 0
    t1: int = 0
    tid: int = 0  # the thread that stepped
    data_wait_ns: int = 0
    ranges: dict[int, list[int]] = field(default_factory=dict)  # name id -> durations (ns), the first RANGE_SAMPLES
    range_n: dict[int, int] = field(default_factory=dict)  # name id -> how many ranges
    range_ns: dict[int, int] = field(default_factory=dict)  # name id -> their total time (ns)
    depth: dict[int, int] = field(default_factory=dict)  # name id -> shallowest depth seen
    counts: dict[int, float] = field(default_factory=dict)  # name id -> sum of values
    phases: dict[int, float] = field(default_factory=dict)  # phase name id -> exclusive ns on the loop thread
    values: dict[int, float] = field(default_factory=dict)  # name id -> a number about the step (GPU, syncs)
    sites: dict[int, float] = field(default_factory=dict)  # sync call site name id -> estimated calls
    site_ns: dict[int, float] = field(default_factory=dict)  # sync call site name id -> estimated wait there (ns)
    # bumped by StepAccumulator.add each time it folds records into the step: what was worked out of
    # it before (analysis/rolling.py) is stale when this moved
    rev: int = field(default=0, compare=False, repr=False)

    @property
    def duration_ns(self) -> int:
        return self.t1 - self.t0


class StepAccumulator:
    """Groups records by the step they carry. Completed steps are kept, newest last, up to
    `history`; records of a step that is still running wait in `open`."""

    def __init__(self, history: int = 2000):
        self.completed: deque[StepRecord] = deque(maxlen=history)
        self._by_index: dict[int, StepRecord] = {}
        self.open: dict[int, StepRecord] = {}
        self.gauges: dict[int, float] = {}  # name id -> latest value (GAUGE records)
        self.gauge_steps: dict[int, int] = {}  # name id -> the step its latest value came in
        self.gauge_history: dict[int, deque[tuple[int, int, float]]] = {}  # name id -> (t, step, value), oldest first
        self.hot: deque[tuple[int, int, int, int, float]] = deque(maxlen=HOT_RECORDS)  # (t, phase, line, how, samples)

    def _step(self, index: int) -> StepRecord:
        s = self._by_index.get(index) or self.open.get(index)
        if s is None:
            s = self.open[index] = StepRecord(index)
        return s

    def add(self, records: Iterable[tuple]) -> int:
        """Fold records in; returns how many steps completed."""
        done = 0
        last_index, s = -1, None  # (a step's records come together: its record is looked up once)
        for r in records:
            kind = r[F_KIND]
            if kind == GAUGE:
                nid = r[F_NAME]
                self.gauges[nid] = r[F_VALUE]
                self.gauge_steps[nid] = r[F_STEP]
                history = self.gauge_history.get(nid)
                if history is None:
                    history = self.gauge_history[nid] = deque(maxlen=GAUGE_HISTORY)
                history.append((r[F_T1], r[F_STEP], r[F_VALUE]))
                continue
            if kind == HOT:  # (by time, not by step: a loop without steps has lines too)
                self.hot.append((r[F_T1], r[F_DEPTH], r[F_NAME], r[F_T0], r[F_VALUE]))
                continue
            if r[F_STEP] != last_index or s is None:
                last_index = r[F_STEP]
                s = self._step(last_index)
                s.rev += 1
            if kind == PHASE:
                nid = r[F_NAME]
                s.phases[nid] = s.phases.get(nid, 0.0) + r[F_VALUE]
            elif kind == RANGE:
                nid, d = r[F_NAME], r[F_T1] - r[F_T0]
                ds = s.ranges.get(nid)
                if ds is None:
                    s.ranges[nid], s.range_n[nid], s.range_ns[nid] = [d], 1, d
                else:
                    if len(ds) < RANGE_SAMPLES:
                        ds.append(d)
                    s.range_n[nid] += 1
                    s.range_ns[nid] += d
                if r[F_DEPTH] < s.depth.get(nid, 1 << 30):
                    s.depth[nid] = r[F_DEPTH]
            elif kind == DATA_WAIT:
                s.data_wait_ns += r[F_T1] - r[F_T0]
            elif kind == COUNT:
                s.counts[r[F_NAME]] = s.counts.get(r[F_NAME], 0.0) + r[F_VALUE]
            elif kind == STEP_VALUE:  # (GPU values arrive a few steps late: the step is found by index)
                s.values[r[F_NAME]] = r[F_VALUE]
            elif kind == SITE:  # (t0: the wait; 0 from a probe that did not time its sites)
                nid = r[F_NAME]
                s.sites[nid] = s.sites.get(nid, 0.0) + r[F_VALUE]
                if r[F_T0] > 0:
                    s.site_ns[nid] = s.site_ns.get(nid, 0.0) + r[F_T0]
            elif kind == STEP:
                s.t0, s.t1, s.tid = r[F_T0], r[F_T1], r[F_TID]
                self.open.pop(s.index, None)
                if s.index not in self._by_index:
                    if len(self.completed) == self.completed.maxlen:
                        self._by_index.pop(self.completed[0].index, None)
                    self.completed.append(s)
                    self._by_index[s.index] = s
                    done += 1
        # Open steps far older than the newest completed one will never complete (a lost STEP
        # record): drop them so memory stays bounded.
        if self.completed and len(self.open) > 64:
            newest = self.completed[-1].index
            for idx in [i for i in self.open if i < newest - 64]:
                del self.open[idx]
        return done

    def forget_hot(self, before_ns: int) -> None:
        """Forget the sampler's records stamped before before_ns (they come about in time order; one
        out of order waits its turn at the front, and its reader's own time filter skips it)."""
        hot = self.hot
        while hot and hot[0][0] < before_ns:
            hot.popleft()

    def window(self, steps: int, first: int = 0) -> list[StepRecord]:
        """The last `steps` completed steps from step `first` on (the first counted by the source
        that counts steps now), leaving out the first step of the job (warm-up: imports,
        compilation, allocator growth) while there are others."""
        recent = [s for s in list(self.completed)[-steps:] if s.index >= first]
        if len(recent) > 2 and recent[0].index == 1:
            recent = recent[1:]
        return recent
