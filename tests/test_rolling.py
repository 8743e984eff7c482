"""analysis.rolling keeps summary's numbers as steps enter and leave the window: the same results as
summary's functions over the same steps, after each of many random batches of records (late records
for steps already done among them) and windows of random sizes."""

import random

from tuimon.analysis import summary
from tuimon.analysis.rolling import RollingWindow
from tuimon.analysis.steps import DATA_WAIT, RANGE, STEP, STEP_VALUE, StepAccumulator


def name_of(nid: int) -> str:
    return f"r{nid % 5}"  # (ids 5 and up share a name with a lower one, as a name table can)


def _records(rng: random.Random, step: int, t: int) -> tuple[list[tuple], int]:
    """One step's records, from time t; returns them and the step's end."""
    out, t0 = [], t
    for _ in range(rng.randrange(0, 6)):
        nid = rng.randrange(8)
        for _ in range(rng.choice((1, 1, 2, 12))):  # (12: more than rolling.FEW at once)
            d = rng.choice((0, rng.randrange(1, 50), rng.randrange(1, 5_000_000)))
            out.append((RANGE, rng.choice((0, 0, 1, 2)), 0, nid, 1, step, t, t + d, 0.0))
            t += d
    if rng.random() < 0.5:
        d = rng.randrange(0, 3_000_000)
        out.append((DATA_WAIT, 0, 0, 0, 1, step, t, t + d, 0.0))
        t += d
    t += rng.choice((0, 1, rng.randrange(1, 10_000_000)))
    out.append((STEP, 0, 0, 0, 1, step, t0, t, 0.0))
    return out, t


def _late(rng: random.Random, acc: StepAccumulator) -> list[tuple]:
    """Records for a step already done: a range, a GPU value, or its STEP record again (a restarted count)."""
    s = rng.choice(list(acc.completed))
    kind = rng.choice((RANGE, STEP_VALUE, STEP))
    if kind == RANGE:
        return [(RANGE, rng.randrange(3), 0, rng.randrange(8), 1, s.index, s.t0, s.t0 + rng.randrange(1, 9_000), 0.0)]
    if kind == STEP:
        return [(STEP, 0, 0, 0, 1, s.index, s.t0, s.t1 + rng.randrange(0, 9_000), 0.0)]
    return [(STEP_VALUE, 0, 0, 7, 1, s.index, 0, 0, 123.0)]


def test_the_rolling_window_says_what_summary_says_over_random_windows():
    rng = random.Random(27)
    for _run in range(8):
        acc, rolling = StepAccumulator(history=rng.choice((50, 256))), RollingWindow()
        step, t, checked = 1, 1_000_000, 0
        for _batch in range(120):
            batch: list[tuple] = []
            for _ in range(rng.choice((0, 1, 1, 3, 10, 40))):
                records, t = _records(rng, step, t)
                batch += records
                step += 1
            acc.add(batch)
            if acc.completed and rng.random() < 0.4:
                acc.add(_late(rng, acc))
            steps = acc.window(rng.choice((1, 2, 3, 10, 100, 100, 100)), rng.choice((0, 0, 0, max(0, step - 30))))
            for _ in range(rng.choice((1, 2))):  # (again: the same steps, what was said holds)
                rolling.update(list(steps))
            assert rolling.step_time_ms() == summary.step_time_ms(steps)
            assert rolling.data_wait_share() == summary.data_wait_share(steps)
            assert rolling.breakdown(name_of) == summary.breakdown(steps, name_of)
            assert rolling.range_table(name_of) == summary.range_table(steps, name_of)
            checked += bool(steps)
        assert checked > 60


def test_a_step_changed_in_place_is_folded_again():
    """A late record for a step in the window (its GPU value, a range) changes the numbers at once."""
    acc, rolling = StepAccumulator(), RollingWindow()
    acc.add([(RANGE, 0, 0, 1, 1, 2, 0, 10, 0.0), (STEP, 0, 0, 0, 1, 2, 0, 100, 0.0)])
    rolling.update(acc.window(100))
    assert [r.count for r in rolling.range_table(name_of)] == [1]
    acc.add([(RANGE, 1, 0, 1, 1, 2, 10, 40, 0.0)])
    rolling.update(acc.window(100))
    assert rolling.range_table(name_of) == summary.range_table(acc.window(100), name_of)
    assert [(r.count, r.depth) for r in rolling.range_table(name_of)] == [(2, 0)]
    rolling.update([])
    assert rolling.range_table(name_of) == [] and rolling.step_time_ms() is None and rolling.breakdown(name_of) is None


def test_what_was_said_holds_until_the_window_changes():
    acc, rolling, calls = StepAccumulator(), RollingWindow(), []

    def work() -> list[int]:
        calls.append(1)
        return [len(rolling.steps)]

    acc.add([(STEP, 0, 0, 0, 1, 2, 0, 100, 0.0)])
    rolling.update(acc.window(100))
    mine = rolling.said("n", work)
    mine.append(99)  # (a copy: the caller's own)
    rolling.update(acc.window(100))
    assert rolling.said("n", work) == [1] and len(calls) == 1
    acc.add([(STEP_VALUE, 0, 0, 7, 1, 2, 0, 0, 5.0)])  # (a late value: the step changed)
    rolling.update(acc.window(100))
    assert rolling.said("n", work) == [1] and len(calls) == 2
    acc.add([(STEP, 0, 0, 0, 1, 3, 100, 200, 0.0)])
    rolling.update(acc.window(100))
    assert rolling.said("n", work) == [2] and len(calls) == 3


def test_a_window_of_steps_that_took_no_time_has_no_shares():
    """Steps (and ranges) of 0 ns, folded in one by one: no data-wait share and no range shares (as
    summary says), never a division by their total."""
    acc, rolling = StepAccumulator(), RollingWindow()
    for step in range(1, 12):
        acc.add([(RANGE, 0, 0, 1, 1, step, 500, 500, 0.0), (STEP, 0, 0, 0, 1, step, 500, 500, 0.0)])
        rolling.update(acc.window(10))  # (once one step of ten is new, fewer than 1/MOSTLY_NEW: folded)
    steps = acc.window(10)
    assert rolling.data_wait_share() is None is summary.data_wait_share(steps)
    assert rolling.breakdown(name_of) is None is summary.breakdown(steps, name_of)
    assert rolling.range_table(name_of) == summary.range_table(steps, name_of)
    assert [r.share for r in rolling.range_table(name_of)] == [None]
