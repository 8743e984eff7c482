"""analysis/steps.py's bounds exactly: a step keeps the first 1024 durations of a range (all of them
counted), a gauge its last 512 values, the sampler's last 20,000 records; open steps more than 64
behind the newest complete one are dropped; the job's first step leaves the window while 3 or more
are in it."""

from tests.test_analysis import MS, rec
from tuimon.analysis.steps import GAUGE, HOT, PHASE, RANGE, SITE, STEP, STEP_VALUE, StepAccumulator


def test_a_range_keeps_its_first_1024_durations_and_counts_all():
    acc = StepAccumulator()
    acc.add([rec(RANGE, 1, k, k + 1 + (k == 0), name=1, depth=3 - (k == 5)) for k in range(1025)] + [rec(STEP, 1, 0, 2000)])
    [s] = acc.completed
    assert len(s.ranges[1]) == 1024 and s.range_n[1] == 1025 and s.range_ns[1] == 1026 * MS
    assert s.ranges[1][0] == 2 * MS and s.depth[1] == 2


def test_a_gauge_keeps_512_values_and_the_sampler_20000_records():
    acc = StepAccumulator()
    acc.add([rec(GAUGE, k, k, k, name=7, value=float(k)) for k in range(513)])
    assert len(acc.gauge_history[7]) == 512 and acc.gauge_history[7][0] == (1 * MS, 1, 1.0)
    assert acc.gauges[7] == 512.0 and acc.gauge_steps[7] == 512
    acc.add([rec(HOT, 0, k, k, name=3) for k in range(20_001)])
    assert len(acc.hot) == 20_000 and acc.hot[0][0] == 1 * MS
    acc.forget_hot(5 * MS)
    assert acc.hot[0][0] == 5 * MS


def test_each_kind_lands_in_its_step():
    acc = StepAccumulator()
    acc.add([rec(PHASE, 2, 0, 0, name=4, value=3.0), rec(PHASE, 2, 0, 0, name=4, value=1.0),
             rec(STEP_VALUE, 2, 0, 0, name=5, value=9.0), rec(SITE, 2, 0, 0, name=6, value=2.0),
             rec(SITE, 2, 0, 0, name=6, value=2.0), rec(STEP, 2, 0, 10)])
    [s] = acc.completed
    assert (s.phases, s.values, s.sites) == ({4: 4.0}, {5: 9.0}, {6: 4.0})
    assert acc.add([rec(STEP, 2, 0, 10)]) == 0  # a step completes once


def test_open_steps_64_behind_the_newest_are_dropped():
    acc = StepAccumulator()
    acc.add([rec(RANGE, k, 0, 1, name=1) for k in range(1, 67)] + [rec(STEP, 130, 0, 1)])
    assert sorted(acc.open) == list(range(66, 67))  # 66 open steps were more than 64 behind 130: those below 66 go
    few = StepAccumulator()
    few.add([rec(RANGE, k, 0, 1, name=1) for k in range(1, 65)] + [rec(STEP, 130, 0, 1)])
    assert len(few.open) == 64  # 64 open steps are kept, however old


def test_the_first_step_leaves_the_window_while_three_are_there():
    acc = StepAccumulator()
    acc.add([rec(STEP, k, k, k + 1) for k in (1, 2)])
    assert [s.index for s in acc.window(10)] == [1, 2]
    acc.add([rec(STEP, 3, 3, 4)])
    assert [s.index for s in acc.window(10)] == [2, 3] and [s.index for s in acc.window(10, first=2)] == [2, 3]
    assert [s.index for s in acc.window(10, first=3)] == [3]
