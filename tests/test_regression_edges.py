"""The regression decision on both sides of its bars, with the published values written out (not
read from thresholds.py, so a moved constant fails here): a mean step 1.1x the baseline's at
p < 0.002 (airspeed velocity's factor and level), 1/1.1 faster, a peak allocated 1.1x grown; and
its edges: empty batches and zero step times left out, 10 batches a side, the warm-up's words, the
GPU's growth at half the step's, the statistics' exact ends."""

from dataclasses import replace

import pytest

from tests.test_regression import PH, baseline, compare_with, job, noisy
from tuimon.analysis.batches import StepBatches
from tuimon.analysis.regression import Reference, _program, betainc, compare, mean_var, no_progress
from tuimon.model import GpuTimes, JobEnd, Memory, TrainingSnapshot

GIB = 2**30


def test_a_mean_step_1_1x_the_baselines_is_a_regression_and_under_it_is_not():
    b = baseline([100.0] * 1000)
    assert compare_with(b, [110.0] * 200).state == "regression"
    assert compare_with(b, [109.99] * 200).state == "same"


def test_a_mean_step_1_over_1_1_of_the_baselines_is_faster():
    b = baseline([110.0] * 1000)
    assert compare_with(b, [100.0] * 200).state == "faster"  # 100/110 = 1/1.1
    assert compare_with(b, [100.01] * 200).state == "same"


def test_the_test_decides_at_p_0_002():
    b = baseline(noisy(3000, 20, 1, sd=2))
    under = compare_with(b, noisy(600, 22.3, 5, sd=8))
    assert under.ratio >= 1.1 and 0.001 < under.p_value < 0.002 and under.state == "regression"
    over = compare_with(b, noisy(600, 22.3, 2, sd=8))
    assert over.ratio >= 1.1 and 0.002 < over.p_value < 0.004 and over.state == "same"


def test_a_peak_allocated_1_1x_the_baselines_grew():
    b = baseline(noisy(3000, 20, 1), peak_allocated=100 * GIB)
    grew = compare_with(b, noisy(600, 20, 2), memory=Memory(peak_allocated=110 * GIB)).peak_memory
    assert grew.grew and grew.ratio == 1.1
    assert not compare_with(b, noisy(600, 20, 2), memory=Memory(peak_allocated=110 * GIB - 2**20)).peak_memory.grew


def test_the_program_is_the_module_or_the_script():
    assert _program(["python", "-m", "pkg.train", "--lr", "1"]) == "pkg.train"
    assert _program(["python", "train.py", "-m"]) == "train.py"  # (a last -m names nothing)
    assert _program(["./run"]) == "./run" and _program([]) == ""


def test_a_job_that_ended_other_than_cleanly_fails():
    from tuimon.analysis.verdicts import Verdict

    c = compare_with(baseline([100.0] * 1000), [100.0] * 200)
    ran = Verdict(code="input-bound", headline="input-bound", evidence="e", next_step="n", confidence="high")
    assert no_progress(c, ran, JobEnd(how="clean", headline="finished")).halted is None
    assert no_progress(c, ran, JobEnd(how="signal", headline="killed by SIGKILL")).halted == "killed by SIGKILL"
    exited = Verdict(code="exited", headline="exited", evidence="e", next_step="n", confidence="high")
    assert no_progress(c, exited, JobEnd(how="exception", headline="boom")).halted == "exited: boom"
    stalled = Verdict(code="stalled", headline="stalled: in sync", evidence="no step for 40 s", next_step="n",
                      confidence="high")
    assert no_progress(c, stalled, None).halted == "stalled: in sync: no step for 40 s"
    assert no_progress(c, ran, None).halted is None


@pytest.mark.parametrize("then, now, note", [(None, 2, "baseline: 1 process; this job: 2 ranks"),
                                             (2, None, "baseline: 2 ranks; this job: 1 process")])
def test_a_baseline_of_another_world_size_in_words(then, now, note):
    b = baseline(noisy(3000, 20, 1), world_size=then)
    t, bs = job(noisy(600, 20, 3), world_size=now)
    assert note in compare(b, "b", t, bs).notes


def test_welch_from_two_values_a_side_and_the_t_tail_at_0():
    from tuimon.analysis.regression import student_t_sf, welch

    greater, less = welch([1.0, 3.0], [0.0, 1.0, 2.0])
    assert greater == pytest.approx(0.246048, abs=1e-6) and less == pytest.approx(1 - greater)  # (scipy.stats.ttest_ind)
    assert welch([1.0, 3.0], [0.0, 2.0]) == pytest.approx((0.276393, 0.723607), abs=1e-6)
    assert student_t_sf(0.0, 5) == 0.5 and student_t_sf(1e9, 5) < 1e-40


def test_collecting_counts_steps_from_half_a_second_a_step():
    t, bs = job([500.0] * 4)
    assert compare(baseline(noisy(3000, 20, 1)), "b", t, bs).progress == "collecting: 2 s of 5 (4 of 10 steps)"
    t, bs = job([499.0] * 4)
    assert compare(baseline(noisy(3000, 20, 1)), "b", t, bs).progress.endswith("of 5")


def test_batches_of_no_steps_or_no_time_are_left_out_of_the_reference():
    """A batch the builder closed empty (0 steps) or with no time (0 ms) says nothing of the job's speed."""
    b = baseline([100.0] * 1000)
    plain = Reference(b)
    for steps, ms in ((0, 5.0), (4, 0.0)):
        padded = Reference(replace(b, batch_steps=[steps, *b.batch_steps], batch_ms=[ms, *b.batch_ms]))
        assert (padded.batches, padded.means, padded.mean_ms) == (plain.batches, plain.means, plain.mean_ms)


def test_step_times_of_zero_are_left_out_of_the_mean_and_the_median():
    """Layout 1 (step times only) and the median beside the mean: a 0 ms step is a counter glitch."""
    b = baseline([100.0] * 1000)
    zeros = replace(b, step_ms=[0.0] * 1500 + [100.0] * 1000, batch_steps=[], batch_ms=[])
    r = Reference(zeros)
    assert r.mean_ms == 100.0 and r.p50 == 100.0 and r.batches == Reference(b).batches


def test_one_value_has_no_spread_and_the_incomplete_beta_is_exact_at_its_ends():
    assert mean_var([5.0]) == (5.0, 0.0)
    assert betainc(2.0, 0.5, 0.0) == 0.0 and betainc(2.0, 0.5, 1.0) == 1.0


def test_the_warm_up_names_its_steps_only_while_it_has_fewer_than_it_needs():
    b = baseline([100.0] * 1000)
    five = StepBatches(10)
    five.add(TrainingSnapshot(pid=1, steps=5, uptime_s=5.0, since_step_s=0.0, recent_step_ms=[1000.0] * 5))
    assert compare(b, "b", None, five).progress == "collecting: warm-up (5 s of 10)"


def test_ten_batches_on_each_side_are_enough_to_compare():
    """REGRESSION_BATCHES (10): a baseline of exactly 10 batches, and a window of exactly 10, compare."""
    b = baseline([100.0] * 50)  # 0.5 s batches of 5 steps
    assert Reference(b).batches == 10
    assert compare_with(b, [100.0] * 200).state == "same"
    long = baseline([100.0] * 1000)
    t, bs = job([100.0] * 50)
    assert len(bs.window(10)) == 10 and compare(long, "b", t, bs).state == "same"


def test_the_gpu_grew_when_its_step_grew_by_half_the_mean_steps_growth_or_more():
    b = baseline([100.0] * 1000, PH, gpu_step_ms=10.0)
    at = compare_with(b, [110.0] * 200, phases=PH, gpu=GpuTimes(steps=50, step_mean_ms=15.0))  # +5 of +10
    assert at.state == "regression" and at.gpu_grown is not None and at.gpu_grown.delta_ms == 5.0
    under = compare_with(b, [110.0] * 200, phases=PH, gpu=GpuTimes(steps=50, step_mean_ms=14.9))
    assert under.state == "regression" and under.gpu_grown is None


def test_a_regression_whose_phases_did_not_grow_names_none():
    c = compare_with(baseline([100.0] * 1000, PH), [110.0] * 200, phases=PH)
    assert c.state == "regression" and c.grown is None
