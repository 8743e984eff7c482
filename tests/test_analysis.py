"""Step grouping and summaries on hand-made records with known answers."""

import pytest

from tuimon.analysis import summary
from tuimon.analysis.steps import COUNT, DATA_WAIT, RANGE, STEP, StepAccumulator

MS = 1_000_000


def rec(kind, step, t0, t1, name=0, depth=0, value=0.0):
    return (kind, depth, 0, name, 1, step, t0 * MS, t1 * MS, value, 0)


def loop(n, wait_ms, fwd_ms, period_ms):
    """n steps of period_ms: wait, then a top-level 'forward' range with a nested 'kernel'."""
    out = []
    for k in range(1, n + 1):
        t = (k - 1) * period_ms
        out += [rec(DATA_WAIT, k, t, t + wait_ms),
                rec(RANGE, k, t + wait_ms + 1, t + wait_ms + 1 + fwd_ms / 2, name=2, depth=1),
                rec(RANGE, k, t + wait_ms, t + wait_ms + fwd_ms, name=1),
                rec(COUNT, k, t + period_ms, t + period_ms, name=3, value=32),
                rec(STEP, k, t, t + period_ms)]
    return out


NAMES = {1: "forward", 2: "kernel", 3: "samples"}.get


def test_percentile_matches_numpy_linear():
    assert summary.percentile([1, 2, 3, 4], 50) == 2.5
    assert summary.percentile([1, 2, 3, 4], 95) == pytest.approx(3.85)
    assert summary.percentile([7], 99) == 7
    with pytest.raises(ValueError):
        summary.percentile([], 50)


def test_window_skips_warmup_and_summaries_add_up():
    acc = StepAccumulator()
    assert acc.add(loop(11, wait_ms=20, fwd_ms=50, period_ms=100)) == 11
    w = acc.window(100)
    assert [s.index for s in w] == list(range(2, 12))
    assert summary.data_wait_share(w) == pytest.approx(0.2)
    assert summary.step_time_ms(w).p50 == 100
    assert summary.breakdown(w, NAMES) == {"data_wait": 0.2, "forward": 0.5, "unaccounted": 0.3}
    table = {r.name: r for r in summary.range_table(w, NAMES)}
    assert table["forward"].share == 0.5 and table["forward"].depth == 0
    assert table["kernel"].depth == 1 and table["kernel"].count == 10
    assert summary.throughput(w, NAMES) == {"samples": 320.0}
    assert summary.steps_per_second(w) == pytest.approx(10.0)


def test_records_of_a_running_step_wait_and_history_is_bounded():
    acc = StepAccumulator(history=5)
    acc.add(loop(3, 10, 10, 50)[:-1])  # the last STEP record has not arrived
    assert [s.index for s in acc.completed] == [1, 2] and 3 in acc.open
    acc.add(loop(20, 10, 10, 50))
    assert len(acc.completed) == 5 and acc.completed[-1].index == 20
    assert not acc.open


def test_empty_window():
    assert summary.step_time_ms([]) is None and summary.data_wait_share([]) is None
    assert summary.breakdown([], NAMES) is None and summary.steps_per_second([]) is None


def test_ranges_per_step_are_bounded_but_counts_and_shares_stay_exact():
    from tuimon.analysis.steps import RANGE_SAMPLES

    n = 3 * RANGE_SAMPLES  # a step with far more ranges of one name than are kept for p95
    recs = [rec(RANGE, 2, 100 + k, 100 + k + (1 if k < RANGE_SAMPLES else 2), name=1) for k in range(n)]
    acc = StepAccumulator()
    acc.add(loop(1, 1, 1, 100) + recs + [rec(STEP, 2, 100, 100 + 10 * n)])
    s = acc.completed[-1]
    assert len(s.ranges[1]) == RANGE_SAMPLES and s.range_n[1] == n
    row = summary.range_table([s], NAMES)[0]
    assert row.count == n and row.mean_ms == round((RANGE_SAMPLES * 1 + 2 * RANGE_SAMPLES * 2) / n, 3)
    assert row.share == pytest.approx((RANGE_SAMPLES + 4 * RANGE_SAMPLES) / (10 * n), abs=1e-4)
    assert summary.breakdown([s], NAMES)["forward"] == row.share
    # a loop without steps: its one open step stays bounded however long it runs
    acc = StepAccumulator()
    for _ in range(10):
        acc.add([rec(RANGE, 1, 0, 1, name=1)] * 10_000)
    assert len(acc.open[1].ranges[1]) == RANGE_SAMPLES and acc.open[1].range_n[1] == 100_000


def test_hot_lines_leave_out_samples_a_damaged_channel_says_and_keep_the_rest():
    """anatomy.hot_lines over (t, phase, line id, how, samples): a how outside python/native/waiting
    or a count that is not positive (bytes of a damaged segment) is left out; it neither divides by
    zero nor moves the shares of the good samples."""
    from tuimon.analysis.anatomy import hot_lines

    good = [(0, 0, 1, 0, 30), (0, 0, 1, 1, 10), (0, 1, 2, 2, 60)]
    damaged = [(0, 0, 3, 7, 50), (0, 2, 4, 9, 5), (0, 0, 1, 0, 0), (0, 1, 5, 1, -4)]
    rows, total = hot_lines(good + damaged, lambda nid: f"train.py:{nid}", ("other", "data", "forward"))
    assert (rows, total) == hot_lines(good, lambda nid: f"train.py:{nid}", ("other", "data", "forward"))
    assert total == 100 and [(r.phase, r.line, r.share) for r in rows] == [("data", "train.py:2", 0.6),
                                                                            ("other", "train.py:1", 0.4)]
    assert rows[1].python == 0.75 and rows[1].native == 0.25
