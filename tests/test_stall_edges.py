"""The stall bar (analysis/stall.py) on both sides of each of its edges, with the published values
written out: 5x the longest step (NVIDIA Resiliency Extension's safety_factor), never under 20 s,
a loop thread under 10% of a core idle; a step's quiet time exactly at the bar is not a stall."""

from tuimon.analysis.stall import check, culprits, limit_s, loop_idle, rank_check
from tuimon.model import ProcessSample, RankRow, StepInProgress, TrainingSnapshot


def now(phase: str, phase_s: float) -> StepInProgress:
    return StepInProgress(step=1, phase=phase, phase_s=phase_s, step_s=None, still_s=phase_s)


def test_the_bar_is_5x_the_longest_step_and_at_least_20_s():
    assert limit_s(None) == 20.0 and limit_s(3999.0) == 20.0 and limit_s(4000.0) == 20.0 and limit_s(5000.0) == 25.0


def snap(**kw) -> TrainingSnapshot:
    return TrainingSnapshot(pid=1, **kw)


def test_after_a_step_quiet_past_the_bar_is_a_stall_and_at_it_is_not():
    assert check(snap(steps=10, since_step_s=25.0, longest_step_ms=5000.0)).stalled is False
    assert check(snap(steps=10, since_step_s=25.01, longest_step_ms=5000.0)).stalled is True
    assert check(snap(steps=10, since_step_s=20.0, longest_step_ms=100.0)).stalled is False
    assert check(snap(steps=10, since_step_s=20.01, longest_step_ms=100.0)).stalled is True
    assert check(snap(state="exited", steps=10, since_step_s=99.0)) is None
    assert check(None) is None


def test_before_the_first_step_a_wait_or_an_idle_thread_past_the_bar():
    waiting = check(snap(steps=0, uptime_s=100.0, now=now("data", 20.01)))
    assert waiting.stalled and waiting.first_step and not waiting.idle and waiting.quiet_s == 20.01
    assert not check(snap(steps=0, uptime_s=100.0, now=now("data", 20.0))).stalled
    assert not check(snap(steps=0, uptime_s=100.0, now=now("forward", 30.0))).stalled  # busy there: work
    idle = ProcessSample(pid=1, procs=[], loop_cpu=9.9)
    s = check(snap(steps=0, uptime_s=100.0, now=now("forward", 30.0)), idle)
    assert s.stalled and s.idle
    assert not check(snap(steps=0, uptime_s=100.0, now=now("data", 30.0)), idle).idle  # (a wait, not idleness)
    # the phase's time is no older than the probe
    assert check(snap(steps=0, uptime_s=20.0, now=now("data", 30.0))).quiet_s == 20.0
    assert check(snap(steps=0, uptime_s=0.0, now=now("data", 30.0))).quiet_s == 30.0
    assert check(snap(steps=0)) is None


def test_a_loop_thread_under_10_percent_of_a_core_is_idle():
    assert loop_idle(ProcessSample(pid=1, procs=[], loop_cpu=9.9))
    assert not loop_idle(ProcessSample(pid=1, procs=[], loop_cpu=10.0))
    assert not loop_idle(ProcessSample(pid=1, procs=[], loop_cpu=5.0, loop_cpu_wait=5.0))  # waiting for a core: use
    assert not loop_idle(ProcessSample(pid=1, procs=[], alive=False, loop_cpu=1.0))
    assert not loop_idle(ProcessSample(pid=1, procs=[])) and not loop_idle(None)


def rank(r: int, phase: str | None = "comm", steps: int = 10, since_s: float | None = 25.01, state: str = "alive",
         phase_s: float | None = None, longest_ms: float = 5000.0) -> RankRow:
    return RankRow(rank=r, pid=100 + r, state=state, steps=steps, since_step_s=since_s, longest_step_ms=longest_ms,
                   now_phase=phase, now_phase_s=phase_s)


def test_a_rank_past_its_bar():
    assert rank_check(rank(0)) and not rank_check(rank(0, since_s=25.0))
    assert not rank_check(rank(0, state="exited")) and not rank_check(rank(0, phase=None))
    # before its first step: waiting in one phase past the bar
    assert rank_check(rank(0, steps=0, since_s=None, phase="comm", phase_s=25.01))
    assert not rank_check(rank(0, steps=0, since_s=None, phase="comm", phase_s=25.0))
    assert not rank_check(rank(0, steps=0, since_s=None, phase="forward", phase_s=99.0))


def test_the_rank_the_others_wait_for():
    a, b, c = rank(0, "comm"), rank(1, "forward"), rank(2, "sync")
    assert culprits([a, b, c]) == ([b], [a, c])
    gone = rank(3, None, state="exited")
    assert culprits([a, c, gone]) == ([gone], [a, c])
    # every rank waits: the one behind (the lowest step) is held
    low, high = rank(0, "comm", steps=9), rank(1, "comm", steps=10)
    assert culprits([low, high]) == ([low], [high])
    assert culprits([rank(0, "comm"), rank(1, "comm")]) == ([], [rank(0, "comm"), rank(1, "comm")])


def test_a_time_since_a_step_counts_only_once_a_step_was_made():
    s = check(snap(steps=0, since_step_s=30.0, uptime_s=100.0, now=now("forward", 5.0)))
    assert s.first_step and not s.stalled and s.quiet_s == 5.0
    assert not rank_check(rank(0, steps=0, since_s=30.0, phase="forward", phase_s=5.0))
