"""The regression decision on both sides of its bars, with the published values written out (not
read from thresholds.py, so a moved constant fails here): a mean step 1.1x the baseline's at
p < 0.002 (airspeed velocity's factor and level), 1/1.1 faster, a peak allocated 1.1x grown."""

import pytest

from tests.test_regression import baseline, compare_with, noisy
from tuimon.analysis.regression import _program, no_progress
from tuimon.model import JobEnd, Memory

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
    from tests.test_regression import job
    from tuimon.analysis.regression import compare

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
    from tests.test_regression import job
    from tuimon.analysis.regression import compare

    t, bs = job([500.0] * 4)
    assert compare(baseline(noisy(3000, 20, 1)), "b", t, bs).progress == "collecting: 2 s of 5 (4 of 10 steps)"
    t, bs = job([499.0] * 4)
    assert compare(baseline(noisy(3000, 20, 1)), "b", t, bs).progress.endswith("of 5")
