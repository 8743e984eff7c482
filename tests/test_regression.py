"""Baselines and the regression decision: steps cut into batches (any step time, warm-up left out),
Welch's t-test on batch means, the comparison of mean step times with the median and p95 beside it,
the peak memory, and baseline files (made from a real H100 recording, saved, read back, and refused
when bad)."""

import json
import os
import random

import pytest

from tests.conftest import ROOT
from tuimon.analysis import thresholds as T
from tuimon.analysis.batches import StepBatches, batched
from tuimon.analysis.regression import Reference, compare, student_t_sf, welch
from tuimon.model import (
    BASELINE_VERSION,
    Baseline,
    GpuTimes,
    Memory,
    PhaseRow,
    StepTimes,
    TrainingSnapshot,
    to_json,
)
from tuimon.monitor.baseline import BaselineBuilder, BaselineError, describe, dumps, load
from tuimon.sources.recording import Recording

H100 = str(ROOT / "tests" / "fixtures" / "h100_demo_v2.jsonl")
STUCK = str(ROOT / "tests" / "fixtures" / "h100_sync_stuck.jsonl")
GIB = 2**30


def test_student_t_and_welch_agree_with_scipy():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2.5, 9, 30, 1000):
        for t in (-6, -1.5, 0.0, 0.3, 2.0, 8.0):
            assert student_t_sf(t, df) == pytest.approx(stats.t.sf(t, df), rel=1e-9, abs=1e-15)
    rng = random.Random(1)
    for _ in range(40):
        x = [rng.gauss(10, 2) for _ in range(rng.randint(2, 30))]
        y = [rng.gauss(10.5, 3) for _ in range(rng.randint(2, 400))]
        greater, less = welch(x, y)
        assert greater == pytest.approx(stats.ttest_ind(x, y, equal_var=False, alternative="greater").pvalue, rel=1e-9)
        assert less == pytest.approx(stats.ttest_ind(x, y, equal_var=False, alternative="less").pvalue, rel=1e-9)


def test_welch_degenerate_inputs():
    assert welch([1.0], [1.0, 2.0]) == (1.0, 1.0)  # one value: no spread to test with
    assert welch([2.0] * 5, [1.0] * 5) == (0.0, 1.0)  # no spread on either side: the means decide
    assert welch([1.0] * 5, [1.0] * 5) == (1.0, 1.0)


# -- the job's steps as batches -------------------------------------------------------------------

def cycles(step_ms, start_s=20.0, before=1000, cycle_ms=1000.0, pid=1, **kw):
    """Snapshots of a job as a monitor polling every cycle_ms sees it: `before` steps done by
    start_s of its uptime (past its warm-up), then step_ms's steps; each snapshot holds the last
    120 step times, as TrainingView's do."""
    done, up, out, last, acc = before, start_s, [], [], 0.0
    for ms in step_ms:
        done, up, acc = done + 1, up + ms / 1e3, acc + ms
        last.append(ms)
        if acc >= cycle_ms:
            out.append(TrainingSnapshot(pid=pid, steps=done, uptime_s=round(up, 3), since_step_s=0.0,
                                        recent_step_ms=last[-120:], **kw))
            last, acc = last[-120:], 0.0
    return out


def fed(snaps, keep=10**6) -> StepBatches:
    b = StepBatches(keep)
    for s in snaps:
        b.add(s)
    return b


def test_batches_hold_every_step_and_its_time_whatever_the_step_time():
    # 1 ms steps: more between two cycles than a snapshot holds: counted, and timed end to end
    fast = fed(cycles([1.0] * 30_000))
    assert fast.counted == 120 + 29_000  # (the first snapshot brings the 120 it holds of its 1,000)
    assert all(b.ms >= 900 and b.mean_ms == pytest.approx(1.0, rel=1e-3) for b in fast.batches)
    assert len(fast.batches) == 29
    # 10 s steps: each one a batch
    slow = fed(cycles([10_000.0] * 12))
    assert [b.steps for b in slow.batches] == [1] * 12 and slow.batches[-1].mean_ms == 10_000
    # 80 ms steps: 7 to a batch, every step's time kept for the percentiles
    mid = fed(cycles([80.0] * 600))
    assert {b.steps for b in mid.batches} == {7} and all(len(b.samples) == 7 for b in mid.batches)


def test_a_bursty_loop_is_measured_by_what_it_pays():
    """4 workers: three steps find a batch ready, the fourth waits for the next round."""
    b = fed(cycles([5.0, 5.0, 5.0, 305.0] * 200))
    window = b.window(10)
    mean = sum(x.ms for x in window) / sum(x.steps for x in window)
    assert mean == pytest.approx(80.0, rel=0.01)


def test_the_warm_up_is_the_first_steps_and_the_first_seconds():
    steps = [100.0] * 200  # a job from its start: uptime 0, no step before
    b = fed(cycles(steps, start_s=0.0, before=0))
    # left out: steps 1..5 and every step that began before 10 s (steps 1..100)
    assert b.counted == 100 and sum(x.steps for x in b.batches) + b.open.steps == 100
    long = fed(cycles([3000.0] * 12, start_s=0.0, before=0))  # 3 s steps: the first 5 (15 s) are the warm-up
    assert long.counted == 12 - 5
    early = StepBatches(10)
    early.add(cycles([100.0] * 30, start_s=0.0, before=0)[-1])
    assert early.in_warmup and early.counted == 0


def test_another_process_or_a_counter_that_restarts_starts_over():
    b = fed(cycles([100.0] * 300))
    assert len(b.batches) > 10
    b.add(cycles([100.0] * 30, pid=2)[-1])
    assert b.pid == 2 and len(b.batches) == 6 and b.counted == 30  # (its history: the steps its snapshot holds)
    b.add(TrainingSnapshot(pid=2, steps=3, uptime_s=40.0, since_step_s=0.0, recent_step_ms=[100.0] * 3))
    assert b.counted == 0


# -- the comparison ------------------------------------------------------------------------------

def baseline(step_ms, phases=(), **kw) -> Baseline:
    """A baseline of these steps, cut into batches as a BaselineBuilder would."""
    bs = batched(step_ms)
    s = sorted(step_ms)
    mean = sum(step_ms) / len(step_ms)
    return Baseline(version=BASELINE_VERSION, created="2026-11-22T10:00:00+0000", source="test",
                    step_ms=list(step_ms)[-5000:], steps=len(step_ms), phases=list(phases),
                    step_time_ms=StepTimes(p50=s[len(s) // 2], p95=s[int(len(s) * 0.95)], p99=s[-1],
                                           mean=mean, last=step_ms[-1]),
                    batch_steps=[b.steps for b in bs], batch_ms=[b.ms for b in bs], **kw)


def job(step_ms, **kw):
    """The last snapshot of a job running these steps (past its warm-up), and the batches a
    monitor made of it."""
    snaps = cycles(step_ms, **kw)
    return snaps[-1], fed(snaps, keep=int(T.REGRESSION_BATCHES.value))


def compare_with(b, step_ms, **kw):
    t, bs = job(step_ms, **kw)
    return compare(b, "b.json", t, bs)


def noisy(n, mean, seed, sd=0.5):
    rng = random.Random(seed)
    return [max(0.1, rng.gauss(mean, sd)) for _ in range(n)]


def bursty(rounds, batch_ms, seed, quick=5.0):
    """Steps of a loop fed by 4 workers that each take batch_ms a batch (with some jitter)."""
    rng = random.Random(seed)
    out = []
    for _ in range(rounds):
        wait = max(1.0, batch_ms * rng.uniform(0.95, 1.05) - 3 * quick)
        out += [quick * rng.uniform(0.9, 1.1) for _ in range(3)] + [wait]
    return out


PH = [PhaseRow("data", 0.1, 2.0), PhaseRow("forward", 0.3, 6.0), PhaseRow("backward", 0.5, 10.0),
      PhaseRow("other", 0.1, 2.0)]


def test_a_bursty_loop_whose_batches_got_2x_slower_is_a_regression_though_its_median_is_not():
    """The issue's CPU case: mean 80.8 -> 161.1 ms while the median step got faster."""
    b = baseline(bursty(300, 320, 1))
    c = compare_with(b, bursty(100, 640, 2))
    assert c.state == "regression" and c.ratio == pytest.approx(2.0, rel=0.05) and c.p_value < 1e-6
    assert c.mean_ms == pytest.approx(160, rel=0.05) and c.baseline_mean_ms == pytest.approx(80, rel=0.05)
    assert c.p50_ms / c.baseline_p50_ms < T.REGRESSION_FACTOR.value  # what a median would have missed
    assert c.p95_ms / c.baseline_p95_ms > 1.5  # the tail is where it went
    assert c.steps_per_s == pytest.approx(c.baseline_steps_per_s / 2, rel=0.05)


def test_a_slower_window_names_the_phase_that_grew():
    b = baseline(noisy(3000, 20, 1), PH)
    now = [PhaseRow("data", 0.08, 2.0), PhaseRow("forward", 0.23, 6.1), PhaseRow("backward", 0.61, 16.0),
           PhaseRow("other", 0.08, 2.0)]
    c = compare_with(b, noisy(600, 26, 2), phases=now)
    assert c.state == "regression" and c.ratio == pytest.approx(1.3, abs=0.02) and c.p_value < 1e-6
    assert c.grown.name == "backward" and c.grown.delta_ms == pytest.approx(6.0)
    assert [d.name for d in c.phases] == ["data", "forward", "backward", "other"]


def test_steady_noise_one_slow_batch_and_small_shifts_are_not_regressions():
    b = baseline(noisy(3000, 20, 1, sd=2))
    assert compare_with(b, noisy(600, 20, 5, sd=2)).state == "same"
    spiky = noisy(600, 20, 6, sd=2)
    spiky[-100] = 3000.0  # a checkpoint save: one step of 3 s, +30% on the window's mean
    c = compare_with(b, spiky)
    assert c.ratio > T.REGRESSION_FACTOR.value and c.state == "same"  # ...in one batch: the test says noise
    shifted = compare_with(b, noisy(600, 21.6, 7, sd=2))  # 8% slower: significant, but under 1.1x
    assert shifted.p_value < T.REGRESSION_P.value and shifted.state == "same"


def test_at_the_factor_exactly_it_is_a_regression_and_below_it_is_not():
    b = baseline([100.0] * 1000)
    at = compare_with(b, [100.0 * T.REGRESSION_FACTOR.value] * 200)
    below = compare_with(b, [100.0 * T.REGRESSION_FACTOR.value - 0.1] * 200)
    assert at.state == "regression" and below.state == "same"


def test_faster_and_notes():
    b = baseline(noisy(3000, 20, 1), gpu_models=["NVIDIA A100-SXM4-80GB"], command=["python", "train.py"])
    assert compare_with(b, noisy(800, 14, 2)).state == "faster"
    t, bs = job(noisy(600, 20, 3), argv=["python", "other.py"])
    c = compare(b, "b", t, bs, ["NVIDIA H100 80GB HBM3"])
    assert any("A100" in n and "H100" in n for n in c.notes) and "baseline of another program: train.py" in c.notes
    t, bs = job(noisy(600, 20, 3), argv=["python", "train.py", "--lr", "1e-3"])
    assert not any("program" in n for n in compare(b, "b", t, bs).notes)  # other arguments: the same program


def test_collecting_says_how_far_it_is():
    b = baseline(noisy(3000, 20, 1))
    assert compare(b, "b", None, None).progress == "collecting: no steps yet"
    start = StepBatches(10)
    start.add(cycles([100.0] * 40, start_s=0.0, before=0)[-1])  # 4 s into the job, 40 steps
    c = compare(b, "b", None, start)
    assert c.state == "collecting" and c.progress == "collecting: warm-up (4 s of 10)" and c.ratio is None
    first = StepBatches(10)
    first.add(TrainingSnapshot(pid=1, steps=2, uptime_s=5.0, since_step_s=0.0, recent_step_ms=[2000.0, 2000.0]))
    assert compare(b, "b", None, first).progress == "collecting: warm-up (2 of 5 steps, 5 s of 10)"
    t, bs = job([100.0] * 30)  # past the warm-up: 3 s of steps, 6 batches
    c = compare(b, "b", t, bs)
    assert c.progress == "collecting: 3 s of 5" and (c.collected_s, c.needed_s) == (3.0, 5.0)
    t, bs = job([3000.0] * 4)  # 3 s steps: a batch is a step
    c = compare(b, "b", t, bs)
    assert c.progress == "collecting: 12 s of 30 (4 of 10 steps)"


def test_a_slower_gpu_is_named_beside_the_phase_the_loop_waits_in():
    """Seen on an H100: more matmuls in the backward showed on the host as a longer sync (the
    loop waits at loss.item()), while CUDA events saw the GPU's step grow."""
    ph = [PhaseRow("backward", 0.1, 1.0), PhaseRow("sync", 0.25, 3.3), PhaseRow("other", 0.65, 8.7)]
    b = baseline(noisy(3000, 13, 1, sd=0.3), ph, gpu_step_ms=13.1)
    now = [PhaseRow("backward", 0.06, 1.0), PhaseRow("sync", 0.45, 8.1), PhaseRow("other", 0.49, 8.8)]
    c = compare_with(b, noisy(800, 18, 2, sd=0.3), phases=now,
                     gpu=GpuTimes(steps=50, step_ms=17.0, step_mean_ms=18.0))
    assert c.state == "regression" and c.grown.name == "sync" and c.gpu_grown.delta_ms == pytest.approx(4.9)
    assert c.gpu_step_ms == 18.0  # the mean, beside the host's mean
    host = compare_with(b, noisy(800, 18, 2, sd=0.3), phases=now, gpu=GpuTimes(steps=50, step_mean_ms=13.5))
    assert host.gpu_grown is None  # the GPU's step barely moved: the host side grew


def test_without_phases_the_data_wait_is_compared():
    b = baseline(noisy(3000, 20, 1), data_wait_share=0.1)
    c = compare_with(b, noisy(600, 30, 2), data_wait_share=0.4, step_time_ms=StepTimes(p50=30, p95=31, p99=32,
                                                                                       mean=30.0, last=30))
    assert c.state == "regression" and c.grown.name == "data" and c.grown.now_ms > 10 > c.grown.baseline_ms


def test_a_peak_memory_that_grew_is_a_regression_of_its_own():
    b = baseline(noisy(3000, 20, 1), peak_allocated=int(61.0 * GIB))
    grown = compare_with(b, noisy(600, 20, 2), memory=Memory(peak_allocated=int(72.1 * GIB)))
    assert grown.state == "same" and grown.regressed
    assert (grown.peak_memory.ratio, grown.peak_memory.grew) == (pytest.approx(72.1 / 61.0, abs=1e-4), True)
    small = compare_with(b, noisy(600, 20, 2), memory=Memory(peak_allocated=int(66.0 * GIB)))  # +8%
    assert not small.regressed and small.peak_memory.grew is False
    t, bs = job(noisy(100, 20, 2), memory=Memory(peak_allocated=int(72.1 * GIB)))
    early = compare(b, "b", t, bs)  # the step time is still collecting: the memory is decided already
    assert early.state == "collecting" and early.regressed
    cpu = compare_with(b, noisy(600, 20, 2))  # a CPU job: no allocator, no memory comparison
    assert cpu.peak_memory is None and not cpu.regressed
    assert compare_with(baseline(noisy(3000, 20, 1)), noisy(600, 20, 2),
                        memory=Memory(peak_allocated=GIB)).peak_memory is None  # (nor against a CPU baseline)


# -- baselines ------------------------------------------------------------------------------------

def h100_baseline(upto=None) -> Baseline:
    builder = BaselineBuilder("recording h100_demo_v2.jsonl")
    for k, c in enumerate(Recording(H100).cycles()):
        if upto is None or k < upto:
            builder.add(c)
    return builder.build()


def test_a_baseline_from_a_real_h100_recording():
    b = h100_baseline()
    cycles_ = list(Recording(H100).cycles())
    last = cycles_[-1].training
    first = next(c.training for c in cycles_ if c.training.steps)
    assert b.steps == sum(b.batch_steps) and len(b.batch_steps) >= 30
    # every step the recording saw past its warm-up, in batches (the open one left out)
    assert last.steps - first.steps + len(first.recent_step_ms) - T.REGRESSION_WARMUP_STEPS.value - 40 < b.steps
    assert b.command == last.argv and b.gpu_models == ["NVIDIA H100 80GB HBM3"]
    assert b.step_time_ms.mean == pytest.approx(sum(b.batch_ms) / sum(b.batch_steps), abs=1e-3)
    assert b.steps_per_s == pytest.approx(last.steps_per_s, rel=0.1)  # (the recording's own window: ~1 s)
    assert b.peak_allocated == last.memory.peak_allocated and b.gpu_step_ms == pytest.approx(25, abs=5)
    assert {p.name for p in b.phases} == {p.name for p in last.phases}
    assert sum(p.share for p in b.phases) == pytest.approx(1, abs=0.02)
    assert 0 < b.gpu_activity["sm_active"] <= 100 and b.data_wait_share == pytest.approx(last.data_wait_share, abs=0.1)
    text = describe(b)
    assert "NVIDIA H100" in text and "phases: data" in text and "step time mean 2" in text
    assert "peak memory 1.34 GiB" in text


def test_the_h100_job_against_its_own_first_half_is_the_same_job():
    from tuimon.monitor.state import MonitorState

    state = MonitorState(baseline=("half", h100_baseline(upto=18)))  # (its steps alternate ~12 / ~38 ms)
    seen = []
    for c in Recording(H100).cycles():
        state.apply(c)
        seen.append(state.view().baseline.state)
    assert seen[:6] == ["collecting"] * 6 and set(seen[7:]) == {"same"}, seen


def test_a_job_that_makes_no_progress_fails_against_any_baseline():
    """Issue 43 item 11: a hung job had no finished step in the window, so its comparison kept
    'collecting' (exit 0): a stalled job, or one that ended other than cleanly, is a regression
    with the stall (or the end) named; a clean end and a job still stepping are not."""
    from dataclasses import replace

    from tuimon.analysis.ending import job_end
    from tuimon.analysis.regression import no_progress
    from tuimon.monitor.state import MonitorState

    state = MonitorState(baseline=("good.json", h100_baseline()))
    for c in Recording(STUCK).cycles():
        state.apply(c)
    view = state.view()
    assert view.verdict.code == "stalled" and view.baseline.state == "collecting"
    assert view.baseline.regressed and view.baseline.halted.startswith("stalled: waiting for the GPU: no step for 3")
    state = MonitorState(baseline=("good.json", h100_baseline()))
    for c in Recording(H100).cycles():  # (a job stepping along: nothing halted)
        state.apply(c)
    view = state.view()
    assert view.baseline.halted is None and not view.baseline.regressed
    died = job_end(exit_code=1, probe_end="exception", probe_text="RuntimeError: boom", log=None, log_tail=[])
    exited = replace(view.verdict, code="exited", headline="exited (code 1): RuntimeError")
    halted = no_progress(view.baseline, exited, died).halted
    assert halted == "exited (code 1): RuntimeError: exited with code 1: RuntimeError: boom"
    clean = job_end(exit_code=0, probe_end="clean", probe_text="", log=None, log_tail=[])
    assert no_progress(view.baseline, replace(exited, headline="exited: finished"), clean).halted is None


def test_too_few_steps_make_no_baseline():
    builder = BaselineBuilder("x")
    for k, c in enumerate(Recording(H100).cycles()):
        if k < 6:
            builder.add(c)
    with pytest.raises(BaselineError, match=r"only 4\.\d s of steps \(1\d\d steps\) seen past the job's warm-up "
                                            r"\(its first 10 s and 5 steps\): a baseline needs 10 batches"):
        builder.build()


def test_dumps_and_load(tmp_path):
    """(How -o is written, --force included: tests/test_output.py.)"""
    b = h100_baseline()
    path = tmp_path / "b.json"
    path.write_text(dumps(b))
    assert load(str(path)) == b and os.stat(path).st_size < 100_000


def test_a_baseline_of_layout_1_is_still_compared(tmp_path):
    """Layout 1 kept step times, no batches: its batches are cut from them."""
    doc = {"format": "tuimon-baseline", **to_json(baseline(noisy(600, 20, 1)))}
    for k in ("batch_steps", "batch_ms", "peak_allocated"):
        del doc[k]
    p = tmp_path / "v1.json"
    p.write_text(json.dumps({**doc, "version": 1}))
    old = load(str(p))
    assert old.batch_steps == [] and Reference(old).batches == len(batched(old.step_ms)) >= 10
    assert compare_with(old, noisy(600, 30, 2)).state == "regression"


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
        (json.dumps({**good, "version": 3}), "layout 3: this tuimon reads layout 2"),
        (json.dumps({**good, "version": "1"}), "layout '1'"),
        (json.dumps({**good, "step_ms": "fast"}), "damaged baseline"),
        (json.dumps({**good, "batch_ms": good["batch_ms"][:-1]}), "damaged baseline: \\d+ batch step counts for \\d+"),
        (json.dumps({**good, "batch_steps": [1] * 5, "batch_ms": [20.0] * 5}), "5 usable batches of steps: too few"),
        (json.dumps({**good, "batch_steps": [], "batch_ms": [], "step_ms": [-1.0] * 50}), "0 usable batches"),
    ]
    for text, words in cases:
        with pytest.raises(BaselineError, match=words):
            load(write(tmp_path, text))
    with pytest.raises(BaselineError, match="cannot read .*No such file"):
        load(str(tmp_path / "missing.json"))


@pytest.mark.parametrize("then, now, note", [
    (2, None, "baseline: 2 ranks; this job: 1 process"),
    (None, 4, "baseline: 1 process; this job: 4 ranks"),
    (8, 4, "baseline: 8 ranks; this job: 4 ranks"),
    (None, None, None), (1, None, None), (4, 4, None),
])
def test_a_baseline_of_another_world_size_is_noted(then, now, note):
    """No WORLD_SIZE is one process: a single-process job against a DDP baseline is noted too."""
    c = compare_with(baseline(noisy(600, 20, 1), world_size=then), noisy(600, 20, 2), world_size=now)
    ranks = [n for n in c.notes if "rank" in n or "process" in n]
    assert ranks == ([note] if note else []), c.notes
