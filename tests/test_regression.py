"""Baselines and the regression decision: the U test, the window, the comparison, and baseline
files (made from a real H100 recording, saved, read back, and refused when bad)."""

import json
import os
import random
from dataclasses import replace

import pytest

from tests.conftest import ROOT
from tuimon.analysis import thresholds as T
from tuimon.analysis.regression import (
    Reference,
    compare,
    mann_whitney_greater,
    recent_window,
    u_statistic,
    u_test,
)
from tuimon.model import Baseline, PhaseRow, StepTimes, TrainingSnapshot, to_json
from tuimon.monitor.baseline import BaselineBuilder, BaselineError, describe, load, save
from tuimon.sources.recording import Recording

H100 = str(ROOT / "tests" / "fixtures" / "h100_demo_v2.jsonl")


def brute_u(x, y) -> float:
    return sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in x for b in y)


def samples(seed):
    rng = random.Random(seed)
    x = [round(rng.gauss(20, 2), 1) for _ in range(rng.randint(1, 40))]  # rounded: ties happen
    y = [round(rng.gauss(21, 2), 1) for _ in range(rng.randint(2, 60))]
    return x, y


def test_u_counts_the_pairs_and_the_ties():
    for seed in range(30):
        x, y = samples(seed)
        u, ties = u_statistic(x, Reference(y))
        assert u == brute_u(x, y)
        pooled = x + y
        assert ties == sum(pooled.count(v) ** 3 - pooled.count(v) for v in set(pooled))


def test_p_values_agree_with_scipy():
    stats = pytest.importorskip("scipy.stats")
    for seed in range(30):
        x, y = samples(seed)
        greater, less = u_test(x, Reference(y))
        want_g = stats.mannwhitneyu(x, y, alternative="greater", method="asymptotic").pvalue
        want_l = stats.mannwhitneyu(x, y, alternative="less", method="asymptotic").pvalue
        assert greater == pytest.approx(want_g, rel=1e-9, abs=1e-12)
        assert less == pytest.approx(want_l, rel=1e-9, abs=1e-12)


def test_u_test_direction_and_degenerate_inputs():
    base = [20.0 + 0.01 * i for i in range(200)]
    assert mann_whitney_greater([x * 1.3 for x in base[:50]], base) < 1e-10
    assert mann_whitney_greater([x * 0.7 for x in base[:50]], base) > 0.999
    assert u_test([], Reference(base)) == (1.0, 1.0)
    assert u_test([5.0] * 10, Reference([5.0] * 10)) == (1.0, 1.0)  # all equal: no evidence
    assert Reference([0.0, -1.0, float("nan"), float("inf"), 3.0]).sorted == [3.0]


def test_the_window_spans_five_seconds_but_never_fewer_than_twenty_steps():
    assert len(recent_window([10.0] * 1000)) == 500  # 10 ms steps: the last 5 s
    assert len(recent_window([1000.0] * 100)) == T.REGRESSION_MIN_STEPS.value  # 1 s steps: still 20
    assert recent_window([3.0, 4.0]) == [3.0, 4.0]
    assert recent_window([1.0] * 10 + [2.0] * 20)[-1] == 2.0  # the newest last


def snap(step_ms, phases=(), steps=None, **kw) -> TrainingSnapshot:
    """A snapshot of a job well past its warm-up (steps: how many it has done, when it matters)."""
    s = sorted(step_ms)
    st = StepTimes(s[len(s) // 2], s[-1], s[-1], sum(s) / len(s), step_ms[-1]) if step_ms else None
    return TrainingSnapshot(pid=1, steps=steps or len(step_ms) + 1000, recent_step_ms=list(step_ms)[-120:],
                            step_time_ms=st, phases=list(phases), **kw)


def baseline(step_ms, phases=(), **kw) -> Baseline:
    return Baseline(version=1, created="2026-11-22T10:00:00+0000", source="test", step_ms=list(step_ms),
                    phases=list(phases), **kw)


def noisy(n, mean, seed, sd=0.5):
    rng = random.Random(seed)
    return [max(0.1, rng.gauss(mean, sd)) for _ in range(n)]


PH = [PhaseRow("data", 0.1, 2.0), PhaseRow("forward", 0.3, 6.0), PhaseRow("backward", 0.5, 10.0),
      PhaseRow("other", 0.1, 2.0)]


def test_a_slower_window_is_a_regression_and_names_the_phase_that_grew():
    b = baseline(noisy(1000, 20, 1), PH)
    now = [PhaseRow("data", 0.08, 2.0), PhaseRow("forward", 0.23, 6.1), PhaseRow("backward", 0.61, 16.0),
           PhaseRow("other", 0.08, 2.0)]
    c = compare(b, "b.json", snap(noisy(120, 26, 2), now))
    assert c.state == "regression" and c.ratio == pytest.approx(1.3, abs=0.02) and c.p_value < 1e-6
    assert c.grown.name == "backward" and c.grown.delta_ms == pytest.approx(6.0)
    assert [d.name for d in c.phases] == ["data", "forward", "backward", "other"]


def test_steady_noise_one_slow_step_and_small_shifts_are_not_regressions():
    b = baseline(noisy(1000, 20, 1, sd=2))
    assert compare(b, "b", snap(noisy(120, 20, 5, sd=2))).state == "same"
    spiky = noisy(120, 20, 6, sd=2)
    spiky[-1] = 5000.0  # a checkpoint save: one step of 5 s
    assert compare(b, "b", snap(spiky)).state == "same"
    shifted = compare(b, "b", snap(noisy(120, 21.6, 7, sd=2)))  # 8% slower: significant, but under 1.1x
    assert shifted.p_value < T.REGRESSION_P.value and shifted.state == "same"


def test_at_the_factor_exactly_it_is_a_regression_and_below_it_is_not():
    b = baseline([20.0] * 500 + [20.2] * 500)  # median 20.1
    at = compare(b, "b", snap([20.1 * T.REGRESSION_FACTOR.value] * 60))
    below = compare(b, "b", snap([20.1 * T.REGRESSION_FACTOR.value - 0.01] * 60))
    assert at.state == "regression" and below.state == "same"


def test_faster_too_few_steps_and_notes():
    b = baseline(noisy(500, 20, 1), gpu_models=["NVIDIA A100-SXM4-80GB"], command=["python", "train.py"])
    assert compare(b, "b", snap(noisy(120, 14, 2))).state == "faster"
    few = compare(b, "b", snap(noisy(19, 30, 2)))
    assert few.state == "too few steps" and few.window_steps == 19 and few.ratio is None
    assert compare(b, "b", None).state == "too few steps"
    c = compare(b, "b", snap(noisy(60, 20, 3), argv=["python", "other.py"]), ["NVIDIA H100 80GB HBM3"])
    assert any("A100" in n and "H100" in n for n in c.notes) and "baseline of another program: train.py" in c.notes
    same = compare(b, "b", snap(noisy(60, 20, 3), argv=["python", "train.py", "--lr", "1e-3"]))
    assert not any("program" in n for n in same.notes)  # other arguments: the same program


def test_a_slower_gpu_is_named_beside_the_phase_the_loop_waits_in():
    """Seen on an H100: more matmuls in the backward showed on the host as a longer sync (the
    loop waits at loss.item()), while CUDA events saw the GPU's step grow."""
    from tuimon.model import GpuTimes

    ph = [PhaseRow("backward", 0.1, 1.0), PhaseRow("sync", 0.25, 3.3), PhaseRow("other", 0.65, 8.7)]
    b = baseline(noisy(600, 13, 1, sd=0.3), ph, gpu_step_ms=13.1)
    now = [PhaseRow("backward", 0.06, 1.0), PhaseRow("sync", 0.45, 8.1), PhaseRow("other", 0.49, 8.8)]
    c = compare(b, "b", snap(noisy(120, 18, 2, sd=0.3), now, gpu=GpuTimes(steps=50, step_ms=18.0)))
    assert c.state == "regression" and c.grown.name == "sync" and c.gpu_grown.delta_ms == pytest.approx(4.9)
    host = compare(b, "b", snap(noisy(120, 18, 2, sd=0.3), now, gpu=GpuTimes(steps=50, step_ms=13.5)))
    assert host.gpu_grown is None  # the GPU's step barely moved: the host side grew


def test_the_jobs_warm_up_is_not_compared():
    b = baseline(noisy(500, 20, 1))
    start = noisy(30, 40, 2) + noisy(40, 20, 3)  # a job's first 70 steps: 30 slow ones, then steady
    c = compare(b, "b", snap(start, steps=70))
    assert c.state == "same" and c.window_steps == 20  # steps 51..70 only: the slow start is left out
    assert compare(b, "b", snap(start, steps=60)).state == "too few steps"
    assert compare(b, "b", snap(noisy(70, 40, 2), steps=70)).state == "regression"  # slow past its warm-up too


def test_without_phases_the_data_wait_is_compared():
    b = baseline(noisy(500, 20, 1), data_wait_share=0.1, step_time_ms=StepTimes(20, 21, 22, 20.0, 20))
    c = compare(b, "b", snap(noisy(120, 30, 2), data_wait_share=0.4))
    assert c.state == "regression" and c.grown.name == "data" and c.grown.now_ms > 10 > c.grown.baseline_ms


def h100_baseline(upto=None) -> Baseline:
    builder = BaselineBuilder("recording h100_demo_v2.jsonl")
    for k, c in enumerate(Recording(H100).cycles()):
        if upto is None or k < upto:
            builder.add(c)
    return builder.build()


def test_a_baseline_from_a_real_h100_recording():
    b = h100_baseline()
    cycles = list(Recording(H100).cycles())
    last = cycles[-1].training
    assert b.steps == last.steps - T.REGRESSION_WARMUP_STEPS.value  # every step the recording saw past warm-up
    assert b.command == last.argv and b.gpu_models == ["NVIDIA H100 80GB HBM3"]
    assert b.step_time_ms.p50 == pytest.approx(last.step_time_ms.p50, rel=0.15)
    assert {p.name for p in b.phases} == {p.name for p in last.phases}
    assert sum(p.share for p in b.phases) == pytest.approx(1, abs=0.02)
    assert 0 < b.gpu_activity["sm_active"] <= 100 and b.data_wait_share == pytest.approx(last.data_wait_share, abs=0.1)
    # The job against its own first half: the same job (its steps alternate ~12 / ~38 ms)
    half = h100_baseline(upto=18)
    assert compare(half, "half", last).state == "same"
    assert "NVIDIA H100" in describe(b) and "phases: data" in describe(b)


def test_too_few_steps_make_no_baseline():
    builder = BaselineBuilder("x")
    builder.add(next(iter(Recording(H100).cycles())))
    with pytest.raises(BaselineError, match="only 0 steps seen past the job's first 50 .its warm-up.: a baseline needs at least 20"):
        builder.build()


def test_save_and_load(tmp_path):
    b = h100_baseline()
    (tmp_path / "out").mkdir()
    path = str(tmp_path / "out" / "b.json")
    save(b, path)
    assert load(path) == b and os.stat(path).st_size < 100_000
    with pytest.raises(BaselineError, match="exists: --force"):
        save(b, path)
    save(replace(b, source="again"), path, force=True)
    assert load(path).source == "again" and os.listdir(tmp_path / "out") == ["b.json"]  # no temporary file left


def write(tmp_path, text) -> str:
    p = tmp_path / "bad.json"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(p)


def test_bad_baselines_are_refused_in_words(tmp_path):
    good = {"format": "tuimon-baseline", **to_json(h100_baseline())}
    cases = [
        ("[1, 2", "not JSON"),
        (b"\xff\xfe\x00garbage", "not text"),
        (json.dumps({"format": "tuimon-recording", "version": 2}), "is not a tuimon baseline"),
        (json.dumps({**good, "version": 2}), "layout 2: this tuimon reads layout 1"),
        (json.dumps({**good, "version": "1"}), "layout '1'"),
        (json.dumps({**good, "step_ms": "fast"}), "damaged baseline"),
        (json.dumps({**good, "step_ms": [20.0] * 5}), "5 usable step times: too few"),
        (json.dumps({**good, "step_ms": [-1.0] * 50}), "0 usable step times"),
    ]
    for text, words in cases:
        with pytest.raises(BaselineError, match=words):
            load(write(tmp_path, text))
    with pytest.raises(BaselineError, match="cannot read .*No such file"):
        load(str(tmp_path / "missing.json"))
    with pytest.raises(BaselineError, match="cannot write .*No such file"):
        save(h100_baseline(), str(tmp_path / "no-such-folder" / "b.json"))


@pytest.mark.parametrize("then, now, note", [
    (2, None, "baseline: 2 ranks; this job: 1 process"),
    (None, 4, "baseline: 1 process; this job: 4 ranks"),
    (8, 4, "baseline: 8 ranks; this job: 4 ranks"),
    (None, None, None), (1, None, None), (4, 4, None),
])
def test_a_baseline_of_another_world_size_is_noted(then, now, note):
    """No WORLD_SIZE is one process: a single-process job against a DDP baseline is noted too."""
    c = compare(baseline(noisy(200, 20, 1), world_size=then), "b.json", snap(noisy(200, 20, 2), world_size=now))
    ranks = [n for n in c.notes if "rank" in n or "process" in n]
    assert ranks == ([note] if note else []), c.notes
