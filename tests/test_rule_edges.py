"""Each verdict rule on both sides of each of its thresholds, with the threshold's published value
written out (20%, 80%, 1/0.7...), not read from thresholds.py: a constant moved there, or a >=
made >, fails here (issue 42 item 10)."""

import pytest

from tests.helpers.flat_evidence import flat_evidence as Evidence
from tuimon.analysis import thresholds as T
from tuimon.analysis.verdicts import diagnose
from tuimon.model import CopyTimes, Memory, Straggler

# the published values (thresholds.py cites where each comes from)
PUBLISHED = {
    "LOOP_BLOCKED_SAMPLES": 0.5, "DP_DEVICES": 2, "DP_OWN": 0.10,
    "MIN_STEPS": 5, "INPUT_HIGH": 0.20, "INPUT_MODERATE": 0.05, "COPY_HIGH": 0.20, "SYNC_HIGH": 0.20,
    "SYNC_MODERATE": 0.05, "GPU_BUSY": 80, "GPU_IDLE": 50, "UNIT_BOUND": 60, "UNIT_LEAD": 10, "LOOP_CPU_BUSY": 90,
    "WORKERS_BUSY": 90, "STRAGGLER": 1 / 0.7, "RANK_FACTOR": 4, "MODEL_MAJORITY": 0.5, "INTRA_OP_IDLE": 50,
    "COMM_HIGH": 0.10, "STALL_FACTOR": 5, "STALL_FLOOR": 20, "STALL_WARMUP_STEPS": 5, "STALL_IDLE_CPU": 10,
    "HOT_MIN_SAMPLES": 20, "OP_HOST_US": 5, "OP_HOST_MAX_US": 25, "REGRESSION_FACTOR": 1.10, "REGRESSION_P": 0.002,
    "REGRESSION_BATCH_S": 0.5, "REGRESSION_BATCHES": 10, "REGRESSION_WARMUP_STEPS": 5, "REGRESSION_WARMUP_S": 10,
    "PEAK_MEMORY_FACTOR": 1.10, "MEMORY_RETRIES": 0.05, "MEMORY_FULL": 0.90, "MEMORY_GROWTH_WINDOW": 60,
    "MEMORY_GROWTH_READS": 10, "MEMORY_GROWTH_FIT": 0.9, "MEMORY_GROWTH_PEAK": 0.5, "MEMORY_GROWTH_HORIZON": 600,
}


def test_every_threshold_is_the_published_one():
    assert {n: t.value for n, t in T.ALL.items()} == pytest.approx(PUBLISHED, rel=1e-12)


def gpm(sm, tensor=5.0, dram=10.0, fp32=2.0, fp16=1.0):
    return dict(gpm=True, sm_active=sm, tensor_active=tensor, dram_bw=dram, fp32_active=fp32, fp16_active=fp16)


# no part of the step 4x the 5% bars: a moderate data wait or sync share holds against every part
SPREAD = {"data": 0.05, "forward": 0.06, "backward": 0.06, "optimizer": 0.01, "sync": 0.05, "other": 0.19}
HOST = dict(steps=50, step_ms=40.0, data_share=0.01, sync_share=0.0, sync_per_step=0.0,
            phases={"forward": 0.3, "backward": 0.3, "optimizer": 0.05, "other": 0.35})
CPU = dict(steps=50, step_ms=27.0, data_share=0.01, sync_share=0.0, loop_cpu=97.0, job_cpu=100.0, cpus=2, cuda=False,
           phases={"data": 0.01, "forward": 0.35, "backward": 0.52, "optimizer": 0.01, "other": 0.11})


def code(**given) -> str:
    return diagnose(Evidence(**given)).code


def copies(share: float) -> CopyTimes:
    return CopyTimes(share=share, ms=8.0, h2d_mb=100.0, pageable=1.0, blocking=1.0, calls=2.0)


def straggler(ratio: float) -> Straggler:
    return Straggler(rank=1, pid=7, ratio=ratio, own_ms=10.0 * ratio, others_ms=10.0)


@pytest.mark.parametrize("at, under", [
    # (evidence at the threshold, just on the other side): (its code, the code it gives instead)
    (({**HOST, "steps": 5, **gpm(65)}, "mixed"), ({**HOST, "steps": 4, **gpm(65)}, "waiting")),
    (({**HOST, "data_share": 0.20, **gpm(95)}, "input-bound"), ({**HOST, "data_share": 0.1999, **gpm(95)}, "healthy")),
    (({**HOST, "phases": SPREAD, "data_share": 0.05, **gpm(65)}, "input-bound"),
     ({**HOST, "phases": SPREAD, "data_share": 0.0499, **gpm(65)}, "mixed")),
    # RANK_FACTOR: a part 4x the moderate data wait outranks it
    (({**HOST, "phases": {**SPREAD, "other": 0.1999}, "data_share": 0.05, **gpm(65)}, "input-bound"),
     ({**HOST, "phases": {**SPREAD, "other": 0.20}, "data_share": 0.05, **gpm(65)}, "mixed")),
    (({**HOST, "copies": copies(0.20), **gpm(65)}, "copy-bound"), ({**HOST, "copies": copies(0.1999), **gpm(65)}, "mixed")),
    (({**HOST, "sync_share": 0.20, **gpm(70)}, "sync-bound"), ({**HOST, "sync_share": 0.1999, **gpm(70)}, "mixed")),
    (({**HOST, "phases": SPREAD, "sync_share": 0.05, **gpm(45)}, "sync-bound"),
     ({**HOST, "phases": SPREAD, "sync_share": 0.0499, **gpm(45)}, "host-bound")),
    (({**HOST, "phases": {**SPREAD, "other": 0.1999}, "sync_share": 0.05, **gpm(45)}, "sync-bound"),
     ({**HOST, "phases": {**SPREAD, "other": 0.20}, "sync_share": 0.05, **gpm(45)}, "host-bound")),
    # the moderate syncs need an idle GPU (< 50%), the high ones a GPU not busy (< 80%)
    (({**HOST, "phases": SPREAD, "sync_share": 0.05, **gpm(49.9)}, "sync-bound"),
     ({**HOST, "phases": SPREAD, "sync_share": 0.05, **gpm(50)}, "mixed")),
    (({**HOST, "sync_share": 0.3, **gpm(79.9)}, "sync-bound"),
     ({**HOST, "sync_share": 0.3, **gpm(80, tensor=40, dram=40)}, "healthy")),
    (({**HOST, **gpm(80, tensor=40, dram=40)}, "healthy"), ({**HOST, **gpm(79.9, tensor=40, dram=40)}, "mixed")),
    (({**HOST, **gpm(49.9), "loop_cpu": 99.0}, "host-bound"), ({**HOST, **gpm(50), "loop_cpu": 99.0}, "mixed")),
    (({**HOST, **gpm(90, tensor=5, dram=60)}, "memory-bound"), ({**HOST, **gpm(90, tensor=5, dram=59.9)}, "healthy")),
    (({**HOST, **gpm(90, tensor=60, dram=5)}, "compute-bound"), ({**HOST, **gpm(90, tensor=59.9, dram=5)}, "healthy")),
    # UNIT_LEAD: a unit leads the other by 10 points or more
    (({**HOST, **gpm(90, tensor=60, dram=70)}, "memory-bound"), ({**HOST, **gpm(90, tensor=60.1, dram=70)}, "healthy")),
    (({**HOST, **gpm(90, tensor=70, dram=60)}, "compute-bound"), ({**HOST, **gpm(90, tensor=70, dram=60.1)}, "healthy")),
    (({**CPU, "loop_cpu": 90.0}, "cpu-bound"), ({**CPU, "loop_cpu": 89.9}, "host-bound")),
    (({**CPU, "phases": {"forward": 0.25, "backward": 0.25, "other": 0.5}}, "cpu-bound"),
     ({**CPU, "phases": {"forward": 0.25, "backward": 0.2499, "other": 0.5001}}, "host-bound")),
    (({**HOST, "comm_share": 0.10, **gpm(65)}, "comm-bound"), ({**HOST, "comm_share": 0.0999, **gpm(65)}, "mixed")),
    (({**HOST, "ranks": 2, "straggler": straggler(1 / 0.7), **gpm(65)}, "straggler"),
     ({**HOST, "ranks": 2, "straggler": straggler(1.4285), **gpm(65)}, "mixed")),
    (({**HOST, "memory": Memory(retries_per_step=0.05, retries_from=1, retries_to=21), **gpm(65)}, "memory-pressure"),
     ({**HOST, "memory": Memory(retries_per_step=0.0499, retries_from=1, retries_to=21), **gpm(65)}, "mixed")),
])
def test_each_threshold_on_both_sides(at, under):
    assert code(**at[0]) == at[1]
    assert code(**under[0]) == under[1]


def test_dataloader_workers_at_90_percent_are_busy():
    def step(cpu: list[float]) -> str:
        return diagnose(Evidence(**{**HOST, "data_share": 0.4}, **gpm(30), workers=2, workers_cpu=cpu)).next_step
    assert step([90.0, 90.0]).startswith("num_workers=2, the workers at 90% CPU: more workers")
    assert step([90.0, 89.9]).startswith("num_workers=2, the workers at 90% CPU (not busy)")
    assert diagnose(Evidence(**{**HOST, "data_share": 0.4}, **gpm(30), workers=0)).next_step.startswith("num_workers=0")


def rule_of(code_: str, **given):
    [r] = [r for r in diagnose(Evidence(**given)).rules if r.code == code_]
    return r


def test_the_rules_own_checks_and_words_at_their_edges():
    full = {c.what: c.passed for c in rule_of("memory-pressure", **HOST, memory=Memory(
        retries_per_step=0.1, peak_allocated=90, total=100)).checks}
    assert full["peak of live tensors, of what the allocator may use"] is True
    assert {c.what: c.passed for c in rule_of("memory-pressure", **HOST, memory=Memory(
        retries_per_step=0.1, peak_allocated=89, total=100)).checks}[
        "peak of live tensors, of what the allocator may use"] is False
    assert [c.what for c in rule_of("stalled", **HOST, ranks=2).checks][1:] == ["ranks stalled"]
    assert len(rule_of("stalled", **HOST, ranks=1).checks) == 1
    assert rule_of("straggler", **HOST, ranks=2).why == "fewer than two ranks with enough steps"
    assert rule_of("straggler", **HOST, ranks=1).why == "one process"
    s = Straggler(rank=1, pid=7, ratio=2.0, own_ms=20.0, others_ms=0.0, others_measured_ms=0.05)
    assert "(they measure 0.1," in rule_of("straggler", **HOST, ranks=2, straggler=s).why  # 0.05 ms more: said
    s = Straggler(rank=1, pid=7, ratio=2.0, own_ms=20.0, others_ms=0.0, others_measured_ms=0.0499)
    assert "they measure" not in rule_of("straggler", **HOST, ranks=2, straggler=s).why
