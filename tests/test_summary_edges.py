"""analysis/summary.py at its edges: a window of no time gives no shares (never a division by
zero), a range's depth is the shallowest seen, top-level means depth 0, and a rate needs two steps
that span some time."""

from tuimon.analysis import summary
from tuimon.analysis.steps import StepRecord

NAMES = {1: "forward", 2: "kernel", 3: "samples"}.get


def step(index: int, t0: int, t1: int, **kw) -> StepRecord:
    return StepRecord(index=index, t0=t0, t1=t1, **kw)


def test_a_window_of_no_time_gives_no_shares():
    still = [step(1, 5, 5, data_wait_ns=0, counts={3: 4.0}, ranges={1: [0]}, range_n={1: 1}, range_ns={1: 0})]
    assert summary.data_wait_share(still) is None and summary.breakdown(still, NAMES) is None
    assert summary.throughput(still, NAMES) == {}
    assert summary.range_table(still, NAMES)[0].share is None
    assert summary.steps_per_second(still) is None
    assert summary.steps_per_second([step(1, 5, 5), step(2, 5, 5)]) is None
    assert summary.steps_per_second([step(1, 0, 10**9), step(2, 10**9, 2 * 10**9)]) == 1.0


def test_depths_and_top_level_parts():
    a = step(1, 0, 100, data_wait_ns=10, ranges={1: [50], 2: [20]}, range_n={1: 1, 2: 1}, range_ns={1: 50, 2: 20},
             depth={1: 0, 2: 1})
    b = step(2, 100, 200, ranges={1: [40], 2: [30]}, range_n={1: 1, 2: 1}, range_ns={1: 40, 2: 30},
             depth={1: 2, 2: 0})
    rows = {r.name: r for r in summary.range_table([a, b], NAMES)}
    assert (rows["forward"].depth, rows["kernel"].depth) == (0, 0) and rows["forward"].share == 0.45
    assert summary.range_table([b, a], NAMES)[0].depth == 0
    assert summary.breakdown([a], NAMES) == {"data_wait": 0.1, "forward": 0.5, "unaccounted": 0.4}
    assert summary.throughput([step(1, 0, 2 * 10**9, counts={3: 64.0})], NAMES) == {"samples": 32.0}
