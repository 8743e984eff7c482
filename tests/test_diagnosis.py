"""The diagnosis rules on hand-made evidence, on both sides of every threshold."""

from dataclasses import replace

import pytest

from tests.helpers.flat_evidence import flat_evidence as Evidence
from tuimon.analysis import thresholds as T
from tuimon.analysis.verdicts import diagnose
from tuimon.model import OUTSIDE_PHASE, HotLine, to_json, vocab

HOST = dict(steps=50, step_ms=40.0, data_share=0.01, phases={"forward": 0.3, "backward": 0.3, "optimizer": 0.05,
                                                                "other": 0.35}, sync_share=0.0, sync_per_step=0.0)
# no part of the step 4x the data wait (15%) or the syncs (10%): the moderate rules hold
SPREAD = dict(steps=50, step_ms=40.0, data_share=0.15, phases={"data": 0.15, "forward": 0.15, "backward": 0.15,
                                                                 "optimizer": 0.05, "sync": 0.1, "other": 0.35},
              sync_share=0.1, sync_per_step=2.0)
# the demo on a CPU machine (the numbers): data wait 9%, forward and backward 87%, loop thread 97%
CPU_DEMO = dict(steps=50, step_ms=27.0, data_share=0.09, phases={"data": 0.09, "forward": 0.35, "backward": 0.52,
                                                                   "optimizer": 0.01, "other": 0.03},
                sync_share=0.0, loop_cpu=97.0, job_cpu=100.0, cpus=2, cuda=False)


def outside_line(how: str, share: float = 0.8) -> HotLine:
    split = {"python": (1.0, 0.0, 0.0), "native": (0.1, 0.9, 0.0), "waiting": (0.0, 0.05, 0.95)}[how]
    return HotLine(phase=OUTSIDE_PHASE, line="train.py:41 in main · x = f(batch)", samples=int(200 * share),
                   share=share, phase_share=share, python=split[0], native=split[1], waiting=split[2])


OUTSIDE = dict(has_channel=False, outside=True, outside_samples=250, hot=[outside_line("python")])


def gpm(sm, tensor=5.0, dram=10.0, fp32=2.0, fp16=1.0):
    return dict(gpm=True, sm_active=sm, tensor_active=tensor, dram_bw=dram, fp32_active=fp32, fp16_active=fp16)


@pytest.mark.parametrize("evidence, code, headline", [
    (dict(steps=3, data_share=0.5), "waiting", "not enough data yet"),
    (dict(has_channel=False), "waiting", "no loop timings"),
    ({**HOST, "data_share": 0.25, **gpm(95)}, "input-bound", "input-bound"),  # input first: it hides the rest
    ({**HOST, **gpm(97, tensor=3, dram=88)}, "memory-bound", "GPU memory-bound"),
    ({**HOST, **gpm(96, tensor=93, dram=17)}, "compute-bound", "GPU compute-bound (tensor)"),
    ({**HOST, **gpm(99, tensor=0, dram=20, fp32=85)}, "compute-bound", "GPU compute-bound (FP32)"),
    ({**HOST, **gpm(90, tensor=45, dram=40)}, "healthy", "healthy: the GPU is busy"),
    ({**HOST, **gpm(90, tensor=65, dram=60)}, "healthy", "healthy: the GPU is busy"),  # balanced: no unit leads by 10
    ({**SPREAD, "sync_share": 0.0, **gpm(40)}, "input-bound", "input-bound (moderate)"),
    # a moderate data wait yields to a part of the step 4x larger (forward+backward+optimizer 65%)
    ({**HOST, "data_share": 0.08, **gpm(40), "loop_cpu": 99.0}, "host-bound",
     "host-bound: launches and Python in the model"),
    ({**HOST, "sync_share": 0.25, "sync_per_step": 1.0, "phases": {"sync": 0.25, "other": 0.7}, **gpm(25)},
     "sync-bound", "sync-bound"),
    ({**SPREAD, "data_share": 0.01, "sync_per_step": 300.0, **gpm(30)}, "sync-bound", "sync-bound"),
    ({**HOST, "sync_share": 0.08, "sync_per_step": 300.0, **gpm(30), "loop_cpu": 99.0}, "host-bound",
     "host-bound: launches and Python in the model"),  # moderate syncs outranked (65% is 8x)
    # no CUDA work: the model's compute on a loop thread near a full core is CPU-bound, whatever the data wait
    (CPU_DEMO, "cpu-bound", "CPU-bound: the model's compute"),
    ({**CPU_DEMO, "loop_cpu": 60.0, "loop_cpu_wait": 35.0}, "cpu-bound", "CPU-bound: the model's compute"),
    ({**CPU_DEMO, "loop_cpu": 70.0}, "host-bound", "host-bound: the model's work on the CPU"),  # not a full core
    ({**CPU_DEMO, "cuda": None}, "host-bound", "host-bound: the model's work on the CPU"),  # CUDA not known
    ({**CPU_DEMO, "cuda": True, **gpm(30)}, "host-bound", "host-bound: launches and Python in the model"),
    ({**CPU_DEMO, "data_share": 0.3}, "input-bound", "input-bound"),  # a high data wait still comes first
    ({**HOST, **gpm(20), "loop_cpu": 99.0}, "host-bound", "host-bound: launches and Python in the model"),
    ({**HOST, "phases": {"forward": 0.05, "other": 0.95}, **gpm(10), "loop_cpu": 99.0}, "host-bound",
     "host-bound: Python outside the model"),
    ({**HOST, "phases": {"forward": 0.05, "other": 0.95}, **gpm(10), "loop_cpu": 20.0}, "host-bound",
     "host-bound: the loop waits elsewhere"),
    # waiting for a core counts as wanting the CPU: Python outside the model, on a busy machine
    ({**HOST, "phases": {"forward": 0.05, "other": 0.95}, **gpm(10), "loop_cpu": 55.0, "loop_cpu_wait": 40.0},
     "host-bound", "host-bound: Python outside the model"),
    ({**HOST, "phases": {"forward": 0.05, "other": 0.95}, **gpm(10), "loop_cpu": 55.0, "loop_cpu_wait": 30.0},
     "host-bound", "host-bound: the loop waits elsewhere"),
    # in the model the loop thread's CPU says nothing (on CUDA, backward runs in autograd's own thread)
    ({**HOST, **gpm(10), "loop_cpu": 40.0}, "host-bound", "host-bound: launches and Python in the model"),
    ({**HOST, **gpm(65)}, "mixed", "no single bottleneck"),
    # no probe, sampled from outside (attach): the GPU's unit from NVML, or where the host holds it back
    (dict(has_channel=False, outside=True, outside_why="not sampled yet"), "waiting", "no loop timings"),
    ({**OUTSIDE, **gpm(96, tensor=93, dram=17)}, "compute-bound", "GPU compute-bound (tensor)"),
    ({**OUTSIDE, **gpm(97, tensor=3, dram=88)}, "memory-bound", "GPU memory-bound"),
    ({**OUTSIDE, **gpm(90, tensor=45, dram=40)}, "healthy", "healthy: the GPU is busy"),
    ({**OUTSIDE, **gpm(10)}, "host-bound", "host-bound: the GPU waits (from outside)"),
    ({**OUTSIDE, **gpm(65)}, "mixed", "no single bottleneck (from outside)"),
    (OUTSIDE, "host-bound", "host-bound: no GPU seen (from outside)"),
])
def test_each_class_and_its_headline(evidence, code, headline):
    v = diagnose(Evidence(**evidence))
    assert (v.code, v.headline) == (code, headline), v.evidence
    assert v.next_step and v.confidence in ("high", "medium", "low")
    assert [r.code for r in v.rules] == list(vocab.RULE_CODES)  # every rule, once, in the order tried


def test_the_sync_rule_needs_an_idle_gpu_for_moderate_syncs():
    """5-20% of the step in syncs is sync-bound only when the GPU is mostly idle (< 50% SM): with a
    GPU at 60% the host mostly waits for a busy GPU, which no sync removal fixes."""
    base = {**SPREAD, "data_share": 0.01}
    assert diagnose(Evidence(**base, **gpm(45))).code == "sync-bound"
    assert diagnose(Evidence(**base, **gpm(60))).code == "mixed"
    # >= 20% is sync-bound unless the GPU is busy (then a GPU class decides first)
    assert diagnose(Evidence(**{**base, "sync_share": 0.3}, **gpm(70))).code == "sync-bound"
    assert diagnose(Evidence(**{**base, "sync_share": 0.3}, **gpm(92, tensor=40, dram=30))).code == "healthy"


def test_thresholds_are_exactly_where_the_sources_put_them():
    at = {**HOST}
    assert diagnose(Evidence(**{**at, "data_share": T.INPUT_HIGH.value}, **gpm(95))).code == "input-bound"
    assert diagnose(Evidence(**{**at, "data_share": T.INPUT_HIGH.value - 0.001}, **gpm(95))).code == "healthy"
    assert diagnose(Evidence(**at, **gpm(T.GPU_BUSY.value, tensor=40, dram=40))).code == "healthy"
    assert diagnose(Evidence(**at, **gpm(T.GPU_BUSY.value - 0.1, tensor=40, dram=40))).code == "mixed"
    assert diagnose(Evidence(**at, **gpm(90, tensor=5, dram=T.UNIT_BOUND.value))).code == "memory-bound"
    assert diagnose(Evidence(**at, **gpm(90, tensor=5, dram=T.UNIT_BOUND.value - 0.1))).code == "healthy"
    assert diagnose(Evidence(**at, **gpm(T.GPU_IDLE.value - 0.1), loop_cpu=99)).code == "host-bound"
    assert diagnose(Evidence(**at, **gpm(T.GPU_IDLE.value), loop_cpu=99)).code == "mixed"
    for t in T.ALL.values():
        assert t.source, t


def test_next_steps_come_from_the_evidence():
    e = Evidence(**{**HOST, "data_share": 0.4, "workers": 4, "workers_cpu": [99, 100, 98, 97]}, **gpm(30))
    assert diagnose(e).next_step.startswith("num_workers=4, the workers at 98% CPU: more workers")
    e = Evidence(**{**HOST, "sync_share": 0.3, "sync_per_step": 312.0, "sync_mean_us": 95.0,
                    "sync_sites": [("train.py:88", 312.0)]}, **gpm(20))
    assert diagnose(e).next_step.startswith("312 syncs per step at train.py:88 (312/step)")
    e = Evidence(**HOST, **gpm(15), loop_cpu=100.0, kernels_per_step=12000.0, kernel_us=4.0)
    assert diagnose(e).next_step.startswith("12,000 kernels per step averaging 4.0 us (last capture): CUDA graphs")
    busy_machine = {**HOST, "phases": {"forward": 0.05, "other": 0.95}}
    v = diagnose(Evidence(**busy_machine, **gpm(10), loop_cpu=55.0, loop_cpu_wait=40.0))
    assert "loop thread at 55% CPU + 40% waiting for a core" in v.evidence
    assert v.next_step.endswith("the loop thread waited for a core 40% of the time: other processes compete for "
                                "this machine's CPUs (DataLoader workers beyond the cores, other jobs): leave the loop a core")
    v = diagnose(Evidence(**busy_machine, **gpm(10), loop_cpu=95.0, loop_cpu_wait=3.0))  # busy without the wait
    assert "+ 3% waiting" in v.evidence and "waited for a core" not in v.next_step
    e = Evidence(**HOST, **gpm(97, tensor=0, dram=88))
    assert diagnose(e).next_step.startswith("DRAM 88% while tensor 0% and FP32 2%: the kernels move bytes")
    assert "fuse elementwise ops" in diagnose(e).next_step


def test_confidence_follows_the_margin_and_the_gpu_measure():
    assert diagnose(Evidence(**{**HOST, "data_share": 0.6}, **gpm(30))).confidence == "high"
    assert diagnose(Evidence(**{**HOST, "data_share": 0.21}, **gpm(30))).confidence == "medium"
    coarse = diagnose(Evidence(**HOST, util_gpu=100.0))  # no GPM: a GPU running one tiny kernel reads 100%
    assert coarse.code == "healthy" and coarse.confidence == "low" and "coarse" in coarse.evidence
    blind = diagnose(Evidence(**HOST, loop_cpu=99))
    assert blind.code == "host-bound" and blind.confidence == "low" and "no GPU metrics" in blind.evidence


def test_the_verdict_goes_to_json_with_every_rule():
    doc = to_json(diagnose(Evidence(**HOST, **gpm(97, tensor=3, dram=88))))
    assert doc["code"] == "memory-bound" and {"headline", "evidence", "next_step", "confidence"} <= set(doc)
    fired = [r for r in doc["rules"] if r["fired"]]
    assert fired[0]["code"] == "memory-bound"
    assert {c["what"] for c in fired[0]["checks"]} == {"SM activity", "DRAM bandwidth", "DRAM over tensor"}


def test_no_sub_verdict_while_the_loop_threads_cpu_is_unknown():
    """Time outside the model is Python or a blocked thread: only the loop thread's CPU tells them
    apart, so before it is read the verdict names the class, not a guess."""
    outside = {**HOST, "phases": {"forward": 0.05, "other": 0.95}, **gpm(10)}
    v = diagnose(Evidence(**outside))
    assert v.headline == "host-bound: outside the model" and v.confidence == "low"
    assert "loop thread CPU not read yet" in v.evidence
    assert "Python" not in v.headline and "elsewhere" not in v.headline
    assert diagnose(Evidence(**outside, loop_cpu=3.0)).headline == "host-bound: the loop waits elsewhere"
    assert diagnose(Evidence(**outside, loop_cpu=99.0)).headline == "host-bound: Python outside the model"


def test_a_job_with_no_gpu_in_sight_is_told_cpu_words():
    """No NVML and no CUDA events: the model's work is on the CPU, not launches a GPU waits for."""
    v = diagnose(Evidence(**HOST, loop_cpu=99.0))
    assert v.code == "host-bound" and v.headline == "host-bound: the model's work on the CPU"
    assert "launches" not in v.next_step and "GPU runs it" not in v.next_step
    assert "on the CPU" in v.evidence and "torch.set_num_threads" in v.next_step
    gpu = diagnose(Evidence(**HOST, **gpm(20), loop_cpu=99.0))
    assert gpu.headline == "host-bound: launches and Python in the model"
    assert gpu.next_step.startswith("the host launches work slower than the GPU runs it")


def test_a_gpu_not_measured_is_not_said_to_be_under_a_threshold():
    rules = {r.code: r for r in diagnose(Evidence(**HOST, loop_cpu=99.0)).rules}
    for code in ("memory-bound", "compute-bound", "healthy"):
        assert "under" not in rules[code].why and "not measured" in rules[code].why, rules[code].why
    rules = {r.code: r for r in diagnose(Evidence(**HOST, **gpm(30), loop_cpu=99.0)).rules}
    assert rules["healthy"].why == "SM activity 30% is under 80%: the GPU is not the bottleneck"
    rules = {r.code: r for r in diagnose(Evidence(steps=2)).rules}  # nothing measured yet
    assert rules["input-high"].why == "data wait not measured" and rules["sync-bound"].why == "syncs not measured"


def test_copies_and_the_optimizer_get_the_fix_that_fits_how_they_are_made():
    from tuimon.model import CopyTimes

    pageable = CopyTimes(share=0.8, ms=15.8, h2d_mb=64.0, pageable=1.0, blocking=1.0, calls=1.0)
    v = diagnose(Evidence(**{**HOST, "phases": {"copy": 0.8, "other": 0.2}}, **gpm(10), copies=pageable))
    assert v.code == "copy-bound" and "64.0 MB to the GPU per step" in v.evidence and "100% from pageable" in v.evidence
    assert v.next_step.startswith("the batch is copied from pageable memory") and "pin_memory=True" in v.next_step
    pinned = CopyTimes(share=0.3, ms=5.0, h2d_mb=64.0, pageable=0.0, blocking=1.0, calls=1.0)
    assert "non_blocking=True" in diagnose(Evidence(**HOST, **gpm(10), copies=pinned)).next_step
    small = CopyTimes(share=0.1, ms=1.0, h2d_mb=4.0, pageable=1.0, blocking=1.0, calls=1.0)
    assert diagnose(Evidence(**HOST, **gpm(10), loop_cpu=99.0, copies=small)).code == "host-bound"  # under 20%
    optimizer = {**HOST, "phases": {"forward": 0.1, "backward": 0.1, "optimizer": 0.47, "other": 0.33}}
    v = diagnose(Evidence(**optimizer, **gpm(20), optimizer="SGD foreach=False fused=False params=600"))
    assert v.headline == "host-bound: the optimizer step" and "foreach=True" in v.next_step
    fused = diagnose(Evidence(**optimizer, **gpm(20), optimizer="AdamW foreach=False fused=True params=600"))
    assert "though fused" in fused.next_step


def test_ops_counted_name_the_launches_and_where_they_come_from():
    from tuimon.model import HotLine, OpCounts

    outside = OpCounts(step=40, total=3100, by_phase={"other": 3004, "forward": 96},
                       lines={"train.py:41 in step `y = y * w + b`": 3000})
    hot = [HotLine(phase="other", line="train.py:41 in step `y = y * w + b`", samples=90, share=0.9, phase_share=0.95,
                   native=0.8, python=0.2)]
    e = Evidence(**{**HOST, "step_ms": 40.0, "phases": {"forward": 0.05, "other": 0.95}}, **gpm(10), loop_cpu=99.0,
                 ops=outside, hot=hot)
    v = diagnose(e)
    assert v.headline == "host-bound: launches outside the model"
    # measured: 90% of the 40 ms step at the line that issues 3,000 of them: 12 us an op
    assert "3,004 ops per step outside any module, ~12 us each on the host (90% of the step at the lines" in v.evidence
    assert "3,000 of them at train.py:41" in v.next_step and "torch.compile" in v.next_step
    python = [HotLine(phase="other", line="train.py:50 in log `s += str(x)`", samples=90, share=0.9, phase_share=0.95,
                      python=0.9, native=0.1)]
    assert diagnose(Evidence(**{**e.__dict__, "hot": python})).headline == "host-bound: Python outside the model"
    # the H100's planted loop: the sampler saw the line run Python (a launch holds the GIL for
    # microseconds: the sample lands after it), but 3,007 ops at 5 us at least fill half the time
    h100 = OpCounts(step=21, total=3041, by_phase={"other": 3007, "forward": 6, "backward": 26},
                    lines={"planted.py:303 in run `y = y * 1.0001 + 0.0001`": 3000})
    seen_as_python = [HotLine(phase="other", line="planted.py:303 in run `y = y * 1.0001 + 0.0001`", samples=300,
                              share=0.84, phase_share=0.95, python=1.0, native=0.0)]
    e = Evidence(**{**HOST, "step_ms": 31.4, "phases": {"forward": 0.04, "backward": 0.06, "other": 0.88}},
                 **gpm(10), loop_cpu=100.0, ops=h100, hot=seen_as_python)
    assert diagnose(e).headline == "host-bound: launches outside the model"
    # the H100's run that the 5 us floor missed (other 95% of 32.7 ms: 3,007 x 5 us is under half
    # of it): the time sampled at the line that issues the ops, 67% of the step, names them
    e = Evidence(**{**HOST, "step_ms": 32.7, "phases": {"forward": 0.01, "backward": 0.03, "other": 0.95}},
                 **gpm(10), loop_cpu=100.0, ops=h100, hot=[replace(seen_as_python[0], share=0.67)])
    v = diagnose(e)
    assert v.headline == "host-bound: launches outside the model" and "~7 us each on the host (67% of the step" in v.evidence
    # a line that issues a few ops and spends far longer than an op costs is Python, not launches
    slow_line = OpCounts(step=21, total=130, by_phase={"other": 100, "forward": 6, "backward": 24},
                         lines={"planted.py:303 in run `y = y * 1.0001 + 0.0001`": 100})
    assert diagnose(Evidence(**{**e.__dict__, "ops": slow_line})).headline == "host-bound: Python outside the model"
    # two lines: half the step Python at a line that issues 10 ops, 20% at one that issues 3,000;
    # summed they come to ~9 us an op, but only the second is launches, and it is not half the time
    mixed = OpCounts(step=21, total=3040, by_phase={"other": 3010, "backward": 30},
                     lines={"train.py:50 in log `s = fmt(x) + str(y.sum())`": 10,
                            "train.py:60 in step `y = y * 1.0001 + 0.0001`": 3000})
    hot2 = [HotLine(phase="other", line="train.py:50 in log `s = fmt(x) + str(y.sum())`", samples=250, share=0.5,
                    phase_share=0.55, python=1.0),
            HotLine(phase="other", line="train.py:60 in step `y = y * 1.0001 + 0.0001`", samples=100, share=0.2,
                    phase_share=0.22, python=1.0)]
    e2 = Evidence(**{**HOST, "step_ms": 40.0, "phases": {"backward": 0.05, "other": 0.9}}, **gpm(10), loop_cpu=100.0,
                  ops=mixed, hot=hot2)
    assert diagnose(e2).headline == "host-bound: Python outside the model"
    few = OpCounts(step=377, total=49, by_phase={"other": 9, "forward": 6, "backward": 22, "optimizer": 12})
    assert diagnose(Evidence(**{**e.__dict__, "ops": few})).headline == "host-bound: Python outside the model"
    inside = OpCounts(step=40, total=1200, by_phase={"forward": 800, "backward": 0, "optimizer": 400})
    v = diagnose(Evidence(**HOST, **gpm(10), loop_cpu=99.0, ops=inside))
    assert v.headline == "host-bound: launches and Python in the model" and "1,200 ops per step in the model" in v.next_step


@pytest.mark.parametrize("how, words", [
    ("python", "the main thread runs Python at train.py:41 in main · x = f(batch) (80% of its time) while the GPU "
               "idles: move that work off the loop"),
    ("native", "the main thread is in a native call at train.py:41"),
    ("waiting", "the main thread is blocked at train.py:41"),
])
def test_a_job_without_the_probe_is_judged_from_outside_never_told_to_wait(how, words):
    v = diagnose(Evidence(**{**OUTSIDE, "hot": [outside_line(how)]}, **gpm(12), loop_cpu=97.0))
    assert v.code == "host-bound" and v.next_step.startswith(words), v.next_step
    assert "main thread 80% at train.py:41" in v.evidence and "SM activity 12% (NVML)" in v.evidence
    assert "main thread CPU 97%" in v.evidence
    assert "needs `tuimon run`" in v.next_step and "wait for a few steps" not in v.next_step
    rule = next(r for r in v.rules if r.code == "outside")
    assert rule.fired and [c.passed for c in rule.checks] == [False, True]
    waiting = next(r for r in v.rules if r.code == "waiting")
    assert not waiting.fired and "judged from outside" in waiting.why


def test_a_busy_gpu_from_outside_keeps_its_unit_and_says_what_needs_the_probe():
    v = diagnose(Evidence(**OUTSIDE, **gpm(96, tensor=93, dram=17)))
    assert v.evidence.startswith("SM activity 96% (NVML) · DRAM 17% · tensor 93% · main thread 80% at train.py:41")
    assert v.next_step.endswith("; the loop's anatomy (data, forward, backward, optimizer, syncs) needs `tuimon run`")
    assert v.confidence == "medium"  # (high from the GPU alone, but no loop timings beside it)
    # py-spy could not read it: the GPU still decides, and the lines' absence is said
    v = diagnose(Evidence(has_channel=False, outside=True, outside_why="py-spy cannot sample it", **gpm(96, tensor=93)))
    assert v.code == "compute-bound" and "hot lines: py-spy cannot sample it" in v.evidence
    # a channel wins: the outside rule does not fire for a job with the probe
    v = diagnose(Evidence(**{**HOST, **gpm(96, tensor=93, dram=17)}, outside=True))
    assert v.code == "compute-bound" and "main thread" not in v.evidence
    assert not next(r for r in v.rules if r.code == "outside").fired


def test_a_moderate_share_never_outranks_a_part_four_times_larger():
    """Over a grid of data waits (moderate) and model shares: input-bound (moderate) only where no
    part of the step is RANK_FACTOR times the wait; else the larger part decides."""
    assert T.RANK_FACTOR.value == T.INPUT_HIGH.value / T.INPUT_MODERATE.value == 4
    seen = set()
    for data in (0.05, 0.08, 0.12, 0.19):
        for model in (0.1, 0.3, 0.5, 0.7, 0.9):
            rest = max(0.0, 1 - data - model)
            e = Evidence(steps=50, step_ms=30.0, data_share=data, sync_share=0.0, loop_cpu=99.0, **gpm(30),
                         phases={"data": data, "forward": model / 2, "backward": model / 2, "other": rest})
            v = diagnose(e)
            largest = max(model, rest)
            moderate = v.code == "input-bound"
            assert moderate == (largest < 4 * data), (data, model, v.headline)
            rule = next(r for r in v.rules if r.code == "input-moderate")
            assert rule.checks[1].source == T.RANK_FACTOR.source
            if not moderate:
                assert v.code == "host-bound", v.headline
                assert "outranked" in next(r for r in v.rules if r.code == "host-bound").checks[1].test
            seen.add(v.code)
    assert seen == {"input-bound", "host-bound"}


def test_cpu_bound_says_how_the_cpu_is_used():
    v = diagnose(Evidence(**CPU_DEMO))
    assert (v.code, v.headline) == ("cpu-bound", "CPU-bound: the model's compute")
    assert v.evidence == ("forward+backward+optimizer 88% of the step · loop thread at 97% CPU · the process at 100% CPU "
                          "of 2 cores · data wait 9% · no CUDA work")
    assert v.next_step.startswith("the ops run on the loop thread alone (the process at 100% CPU of 2 cores): more "
                                  "intra-op threads, torch.set_num_threads(N)")
    assert v.confidence == "high"
    threaded = diagnose(Evidence(**{**CPU_DEMO, "job_cpu": 190.0}))  # intra-op threads already busy
    assert threaded.code == "cpu-bound" and threaded.next_step.startswith("the model's arithmetic on the CPU is the "
                                                                          "limit: a GPU (model.to('cuda'))")
    assert "set_num_threads" not in threaded.next_step and "torch.compile" in threaded.next_step
    one_core = diagnose(Evidence(**{**CPU_DEMO, "cpus": 1}))  # nothing to spread over
    assert "set_num_threads" not in one_core.next_step
    rule = next(r for r in v.rules if r.code == "cpu-bound")
    assert [c.passed for c in rule.checks] == [True, None, True, True]  # (no GPU metrics: the idle check is n/a)
    assert rule.why == "no CUDA work; forward+backward+optimizer 88% of the step with the loop thread at 97%"
    # a GPU job (its CUDA events, allocator or NVML place it on a GPU) is never CPU-bound
    for gpu in (dict(cuda=True), dict(cuda=True, **gpm(20)), dict(cuda=None)):
        assert diagnose(Evidence(**{**CPU_DEMO, **gpu})).code != "cpu-bound"
    optimizer = diagnose(Evidence(**{**CPU_DEMO, "phases": {"forward": 0.1, "backward": 0.1, "optimizer": 0.7},
                                     "optimizer": "SGD foreach=False fused=False params=600"}))
    assert optimizer.headline == "CPU-bound: the optimizer step" and "foreach=True" in optimizer.next_step
    # model compute under half the step: not CPU-bound
    small = {**CPU_DEMO, "phases": {"data": 0.09, "forward": 0.2, "backward": 0.2, "other": 0.51}}
    assert diagnose(Evidence(**small)).code == "host-bound"


def test_a_loop_thread_under_a_full_core_whose_own_line_runs_python_is_not_waiting_elsewhere():
    """Issue 43 item 13: a loop thread at 79% CPU whose top line outside the model was 99.6% Python read
    'the loop waits elsewhere' (the rule looked at CPU + wait < 90% and not at how its own line was
    spent). A majority of its samples there running (LOOP_BLOCKED_SAMPLES) is Python; blocked, a wait."""
    def line(python, waiting):
        return HotLine(phase="other", line="train.py:50 in log `s += str(x)`", samples=250, share=0.9,
                       phase_share=0.95, python=python, native=1 - python - waiting, waiting=waiting)

    outside = {**HOST, "phases": {"forward": 0.05, "other": 0.95}, **gpm(10), "loop_cpu": 79.0}
    v = diagnose(Evidence(**outside, hot=[line(0.996, 0.0)]))
    assert v.headline == "host-bound: Python outside the model", v.headline
    assert "samples there are 100% running though its CPU is 79%" in v.next_step, v.next_step
    bar = T.LOOP_BLOCKED_SAMPLES.value
    assert diagnose(Evidence(**outside, hot=[line(1 - bar, bar)])).headline == "host-bound: the loop waits elsewhere"
    assert diagnose(Evidence(**outside, hot=[line(1 - bar + 0.01, bar - 0.01)])).headline == \
        "host-bound: Python outside the model"
    assert diagnose(Evidence(**outside)).headline == "host-bound: the loop waits elsewhere"  # (no samples: its CPU)


def test_a_data_wait_the_loop_spends_running_is_its_own_intake_not_the_workers():
    """The demo on CI's machine read input-bound (data wait 27%) with the workers at rest and the queue
    full: the loop thread ran (unpickling each tensor a worker sends, mapping its shared memory) rather
    than waiting. A majority of its samples in the data phase running (LOOP_BLOCKED_SAMPLES) says
    more workers will not help, or shorten the blocked part; blocked, the workers' advice holds; no
    samples there, the workers'."""
    def line(waiting, samples=120):
        return HotLine(phase="data", line="train.py:20 in main `for x, y in loader:`", samples=samples, share=0.27,
                       phase_share=1.0, python=1 - waiting, native=0.0, waiting=waiting)

    input_bound = {**CPU_DEMO, "data_share": 0.27, "phases": {**CPU_DEMO["phases"], "data": 0.27, "backward": 0.34},
                   "workers": 2, "workers_cpu": [20.0, 21.0]}
    bar = T.LOOP_BLOCKED_SAMPLES.value
    running = diagnose(Evidence(**input_bound, hot=[line(0.0)]))
    assert running.code == "input-bound" and running.next_step.startswith("num_workers=2, and the loop thread's "
                                                                          "samples in its data wait are 100% running")
    assert running.next_step.endswith("more workers will not help") and "set_sharing_strategy" in running.next_step
    # a blocked part that alone is a moderate input wait (INPUT_MODERATE, ~5% of the step) brings the workers'
    # advice with it: its words from their CPU, none while that is not read
    def tail(waiting, **change):
        return diagnose(Evidence(**{**input_bound, **change}, hot=[line(waiting)])).next_step.split("; ")[-1]

    assert tail(bar - 0.01) == ("more workers shorten at most the 49% blocked, ~13% of the step: the workers at 20% "
                                "CPU (not busy): they wait on I/O: faster storage, cached or pre-decoded data, a "
                                "larger prefetch_factor")
    assert tail(bar - 0.01, workers_cpu=[99.0, 98.0]) == ("more workers shorten at most the 49% blocked, ~13% of the "
                                                          "step: the workers at 98% CPU: cheaper transforms, or cores "
                                                          "for more of them")
    assert tail(bar - 0.01, workers_cpu=[]) == "more workers shorten at most the 49% blocked, ~13% of the step"
    edge = T.INPUT_MODERATE.value / 0.27  # (the blocked share whose part of the step is the threshold)
    assert tail(edge + 0.001).startswith(f"more workers shorten at most the {edge + 0.001:.0%} blocked, ~5% of the")
    assert tail(edge - 0.001) == f"more workers shorten at most the {edge - 0.001:.0%} blocked"
    assert tail(0.15) == "more workers shorten at most the 15% blocked"  # (~4% of the step)
    few = int(T.HOT_MIN_SAMPLES.value) - 1  # (too few samples in the phase to say how it was spent)
    for hot in ([line(bar)], [line(1.0)], [], [line(0.0, samples=few)]):
        v = diagnose(Evidence(**input_bound, hot=hot))
        assert v.code == "input-bound" and "wait on I/O" in v.next_step, (hot, v.next_step)
    busy = diagnose(Evidence(**{**input_bound, "workers_cpu": [99.0, 98.0]}, hot=[line(1.0)]))
    assert "more workers (cores allowing)" in busy.next_step
    # num_workers=0: the loop makes its batches, running or not
    assert diagnose(Evidence(**{**input_bound, "workers": 0}, hot=[line(0.0)])).next_step.startswith("num_workers=0")
