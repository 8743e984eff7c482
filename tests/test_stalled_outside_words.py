"""stalled's and outside's words on each branch, and their edges with the published values written
out: confidence high at twice the stall bar; a loop thread under 10% blocked; workers under 10%
idle; from outside, 20 py-spy samples name lines and a GPU at 50% is not idle."""

from tests.helpers.flat_evidence import flat_evidence as Evidence
from tuimon.analysis.stall import Stall
from tuimon.analysis.verdicts import diagnose
from tuimon.model import OUTSIDE_PHASE, HotLine


def stall(quiet=50.0, limit=20.0, phase="forward", first=False, idle=False, phase_s=None) -> Stall:
    return Stall(stalled=True, quiet_s=quiet, limit_s=limit, first_step=first, phase=phase, phase_s=phase_s, idle=idle)


def stalled(s: Stall, **kw):
    v = diagnose(Evidence(steps=50, step_ms=40.0, data_share=0.01, stall=s, **kw))
    assert v.code == "stalled"
    return v


def test_confidence_is_high_from_twice_the_bar():
    assert stalled(stall(quiet=40.0)).confidence == "high" and stalled(stall(quiet=39.9)).confidence == "medium"


def test_a_stall_in_each_phase_in_words():
    assert stalled(stall(phase="data"), workers=0).next_step.startswith("the loop's own data code is stuck")
    assert stalled(stall(phase="data"), workers=2, workers_alive=1).next_step.startswith("1 of 2 DataLoader workers died")
    assert stalled(stall(phase="data"), workers=2, worker_states=[(7, "disk-sleep", 0.0), (8, "sleeping", 50.0)]
                   ).next_step.startswith("1 DataLoader worker(s) blocked in I/O")
    idle = [(7, "sleeping", 9.9), (8, "sleeping", None)]
    assert stalled(stall(phase="data"), workers=2, worker_states=idle).next_step.startswith(
        "the DataLoader's workers are alive and idle")
    assert stalled(stall(phase="data"), workers=2, worker_states=[(7, "sleeping", 10.0), (8, "sleeping", 0.0)]).next_step.startswith(
        "the loader waits for its workers")
    v = stalled(stall(phase="data"), workers=0)
    assert v.headline == "stalled: waiting for data" and "num_workers=0 (the loop makes its own batches)" in v.evidence
    assert stalled(stall(phase="sync")).headline == "stalled: waiting for the GPU"
    assert stalled(stall(phase="comm")).headline == "stalled: in a collective"
    assert stalled(stall(phase=None)).headline == "stalled: no step"
    blocked = stalled(stall(phase="forward"), loop_cpu=9.9).next_step
    assert blocked.startswith("the loop thread is blocked") and stalled(
        stall(phase="forward"), loop_cpu=10.0).next_step.startswith("the loop thread is busy")
    first = stalled(stall(phase="forward", first=True, idle=True))
    assert first.headline == "stalled: blocked before its first step" and first.evidence.startswith(
        "no step yet, blocked for 50 s (bar 20 s)")
    v = stalled(stall(phase="forward", phase_s=30.0), process_state="stopped")
    assert v.headline == "stalled: the process is stopped" and v.evidence.startswith("no step for 50 s (bar 20 s), forward")


def test_stalled_ranks_in_words():
    ranks = dict(ranks=2, stalled_ranks=[(0, "comm", 30.0, None), (1, "forward", 30.0, "train.py:9")])
    v = stalled(stall(), holding_ranks=[1], waiting_ranks=[(0, "allreduce")], **ranks)
    assert v.headline == "stalled: rank 1 holds the others"
    assert v.next_step == "rank 1 never entered the collective rank 0 waits in (allreduce): it is in forward for 30 s"
    v = stalled(stall(), holding_ranks=[1, 2], waiting_ranks=[(0, None), (3, None)], **ranks)
    assert v.headline == "stalled: ranks 1, 2 hold the others" and "ranks 0, 3 wait in:" in v.next_step
    assert stalled(stall(), **ranks).headline == "stalled: every rank waits"
    # one process's own stalled list says nothing of ranks
    assert stalled(stall(phase="sync"), ranks=1, stalled_ranks=[(0, "comm", 30.0, None)]).headline == \
        "stalled: waiting for the GPU"


def line(share=0.8, python=1.0, native=0.0, waiting=0.0) -> HotLine:
    return HotLine(phase=OUTSIDE_PHASE, line="train.py:41 in main", samples=160, share=share, phase_share=share,
                   python=python, native=native, waiting=waiting)


def outside(sm=None, samples=250, hot=None):
    gpu = dict(gpm=True, sm_active=sm, tensor_active=5.0, dram_bw=10.0, fp32_active=2.0) if sm is not None else {}
    return diagnose(Evidence(has_channel=False, outside=True, outside_samples=samples,
                             hot=[line()] if hot is None else hot, **gpu))


def test_from_outside_20_samples_name_lines_and_a_gpu_at_50_is_not_idle():
    def samples_check(n):
        [rule] = [r for r in outside(samples=n).rules if r.code == "outside"]
        return rule.checks[1].passed
    assert samples_check(20) is True and samples_check(19) is False
    assert outside(sm=50.0).code == "mixed" and outside(sm=49.9).code == "host-bound"
    assert outside(sm=49.9).confidence == "medium" and outside(sm=10.0).confidence == "medium"
    assert outside(sm=10.0, hot=[]).confidence == "low"


def test_from_outside_the_top_lines_kind_in_words():
    assert "runs Python at train.py:41" in outside(sm=10.0).next_step
    assert "is in a native call at train.py:41" in outside(sm=10.0, hot=[line(python=0.1, native=0.9)]).next_step
    assert "is blocked at train.py:41" in outside(sm=10.0, hot=[line(python=0.0, waiting=0.95)]).next_step
    assert "main thread 80% at train.py:41 in main (Python)" in outside(sm=10.0).evidence
    assert "(Python 94%)" in outside(sm=10.0, hot=[line(python=0.94, native=0.06)]).evidence
    assert "(Python)" in outside(sm=10.0, hot=[line(python=0.95, native=0.05)]).evidence
