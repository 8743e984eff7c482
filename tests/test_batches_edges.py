"""analysis/batches.py at its edges, with the published values written out: a batch closes at
0.5 s of steps (REGRESSION_BATCH_S), the warm-up is steps 1..5 and every step that began before
10 s of the job's uptime; a batch keeps its last 240 step times."""

from tuimon.analysis.batches import StepBatches, batched
from tuimon.model import TrainingSnapshot


def test_a_batch_closes_at_half_a_second_of_steps():
    assert [(b.steps, b.ms) for b in batched([250.0, 250.0, 499.9, 0.1, 500.0])] == [(2, 500.0), (2, 500.0), (1, 500.0)]


def snap(steps: int, uptime_s: float, recent: list[float], pid: int = 1) -> TrainingSnapshot:
    return TrainingSnapshot(pid=pid, steps=steps, uptime_s=uptime_s, since_step_s=0.0, recent_step_ms=recent)


def test_the_warm_up_is_steps_1_to_5_and_the_first_10_s():
    b = StepBatches(10)
    b.add(snap(7, 20.0, [1000.0] * 7))  # steps 1..7 began at 13..19 s: 6 and 7 count
    assert b.counted == 2
    b = StepBatches(10)
    b.add(snap(20, 11.0, [100.0] * 20))  # step k began at 9 + 0.1 (k-1) s: from step 11 (10.0 s) on
    assert b.counted == 10 and b.counted_ms == 1000.0
    b = StepBatches(10)
    b.add(snap(8, 100.0, [0.0] * 8))  # (steps of no time count nothing)
    assert b.counted == 0


def test_a_batch_keeps_its_last_240_step_times():
    b = StepBatches(10)
    b.add(snap(1000, 1000.0, [1.0] * 120))
    b.add(snap(1120, 1000.12, [0.5] + [1.0] * 119))
    b.add(snap(1240, 1000.24, [2.0] + [1.0] * 119))
    b.add(snap(1600, 1000.6, [1.0] * 120))  # (more steps than the snapshot holds: one take of 360 steps)
    [batch] = b.batches
    assert len(batch.samples) == 240 and batch.samples[0] == 2.0


def test_another_process_or_a_counter_that_went_back_starts_over():
    b = StepBatches(10)
    b.add(snap(100, 100.0, [1.0] * 100))
    assert b.counted == 95  # (steps 1..5: the warm-up)
    b.add(snap(99, 100.0, [1.0] * 99))
    assert b.counted == 94
    b.add(snap(99, 100.0, [1.0] * 99, pid=2))
    assert b.counted == 94 and b.pid == 2


def test_a_step_beginning_at_10_s_exactly_counts():
    b = StepBatches(10)
    b.add(snap(100, 20.0, [1000.0] * 10))  # steps 91..100 began at 10, 11, ..., 19 s
    assert b.counted == 10


def test_the_same_snapshot_twice_adds_nothing():
    b = StepBatches(10)
    b.add(snap(100, 100.0, [100.0] * 10))
    b.add(snap(100, 100.0, [100.0] * 10))
    assert (b.counted, b.counted_ms) == (10, 1000.0)


def test_as_many_new_steps_as_the_snapshot_holds_are_taken_one_by_one():
    b = StepBatches(10)
    b.add(snap(100, 100.0, [100.0] * 10))
    b.add(snap(110, 101.0, [100.0] * 10))
    assert [(x.steps, x.ms) for x in b.batches] == [(5, 500.0), (5, 500.0), (5, 500.0), (5, 500.0)]


def test_the_end_of_the_last_step_moves_only_with_a_new_step():
    b = StepBatches(10)
    b.add(snap(100, 100.0, [100.0] * 10))
    b.add(TrainingSnapshot(pid=1, steps=100, uptime_s=101.0, since_step_s=None, recent_step_ms=[100.0] * 10))
    b.add(snap(400, 103.0, [10.0] * 120))  # 300 steps in the 3 s since step 100 ended at 100 s
    assert b.counted == 310 and b.counted_ms == 4000.0
