"""Numbers about a window of steps: step-time percentiles, data-wait share, range table."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..model import RangeRow, StepTimes
from .steps import StepRecord


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); q in 0..100."""
    if not sorted_values:
        raise ValueError("no values")
    k = (len(sorted_values) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)


def step_time_ms(steps: list[StepRecord]) -> StepTimes | None:
    if not steps:
        return None
    ms = sorted(s.duration_ns / 1e6 for s in steps)
    return StepTimes(
        p50=round(percentile(ms, 50), 3),
        p95=round(percentile(ms, 95), 3),
        p99=round(percentile(ms, 99), 3),
        mean=round(sum(ms) / len(ms), 3),
        last=round(steps[-1].duration_ns / 1e6, 3),
    )


def data_wait_share(steps: list[StepRecord]) -> float | None:
    total = sum(s.duration_ns for s in steps)
    if total <= 0:
        return None
    return min(1.0, sum(s.data_wait_ns for s in steps) / total)


def range_table(steps: list[StepRecord], name_of: Callable[[int], str]) -> list[RangeRow]:
    """One row per range name over the window, largest share first. share: the range's total
    time over the window's total step time (nested ranges overlap their parents). count, mean and
    share are exact; p95 comes from the first RANGE_SAMPLES durations of each step."""
    total = sum(s.t1 - s.t0 for s in steps)
    by: dict[int, list] = {}  # name id -> [samples (for the p95), ranges, their ns, shallowest depth]; one lookup a step
    for s in steps:
        range_n, range_ns, depths = s.range_n, s.range_ns, s.depth
        for nid, ds in s.ranges.items():
            depth = depths.get(nid, 0)
            got = by.get(nid)
            if got is None:
                by[nid] = [list(ds), range_n[nid], range_ns[nid], min(1 << 30, depth)]
            else:
                got[0] += ds
                got[1] += range_n[nid]
                got[2] += range_ns[nid]
                if depth < got[3]:
                    got[3] = depth
    rows = [RangeRow(
        name=name_of(nid),
        count=n,
        mean_ms=round(ns / n / 1e6, 3),
        p95_ms=round(percentile(sorted(ds), 95) / 1e6, 3),
        share=round(ns / total, 4) if total > 0 else None,
        depth=depth,
    ) for nid, (ds, n, ns, depth) in by.items()]
    rows.sort(key=lambda r: -(r.share or 0))
    return rows


def breakdown(steps: list[StepRecord], name_of: Callable[[int], str]) -> dict | None:
    """Where the step goes: data wait, each top-level range, and the unaccounted rest, as shares
    of step time. Top-level ranges and data waits do not overlap on the loop's thread."""
    total = sum(s.duration_ns for s in steps)
    if total <= 0:
        return None
    wait = sum(s.data_wait_ns for s in steps)
    top: dict[int, int] = {}
    for s in steps:
        for nid, total_ns in s.range_ns.items():
            if s.depth.get(nid) == 0:
                top[nid] = top.get(nid, 0) + total_ns
    parts = {"data_wait": wait / total}
    for nid, ns in sorted(top.items(), key=lambda kv: -kv[1]):
        parts[name_of(nid)] = ns / total
    parts["unaccounted"] = max(0.0, 1.0 - sum(parts.values()))
    return {k: round(v, 4) for k, v in parts.items()}


def throughput(steps: list[StepRecord], name_of: Callable[[int], str]) -> dict:
    """Counter totals per second of step time over the window (samples/s, tokens/s)."""
    total_s = sum(s.duration_ns for s in steps) / 1e9
    sums: dict[int, float] = {}
    for s in steps:
        for nid, v in s.counts.items():
            sums[nid] = sums.get(nid, 0.0) + v
    if total_s <= 0:
        return {}
    return {name_of(nid): round(v / total_s, 3) for nid, v in sums.items()}


def steps_per_second(steps: list[StepRecord]) -> float | None:
    if len(steps) < 2:
        return None
    span = steps[-1].t1 - steps[0].t0
    return round(len(steps) / (span / 1e9), 3) if span > 0 else None
