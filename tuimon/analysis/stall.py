"""Is the loop still making progress? A loop is stalled when the time since its last step is far
beyond its own history of steps: more than STALL_FACTOR times its longest step so far (its
warm-up left out), and never under STALL_FLOOR. Before its first step, a loop is stalled when it
has been that long in one open phase (at most the probe's age) and either that phase waits on
something else (data, a device-to-host sync, a collective) or the loop's thread is idle there
(under STALL_IDLE_CPU of a core, waiting for a core counted as use): blocked on a lock, input(),
a sleep, a read. Loading a dataset or compiling before the first step keeps the thread busy: work,
not a stall. Pure: snapshots in, a Stall out. (thresholds.py says where each number comes from.)"""

from __future__ import annotations

from ..model import ProcessSample, RankRow, TrainingSnapshot
from ..model.record import record
from . import thresholds as T

WAITS = ("data", "sync", "comm")  # phases in which the loop waits for someone else
WAITING_ON_PEERS = ("comm", "sync")  # ...for the other ranks, or for a collective queued on the GPU


@record
class Stall:
    stalled: bool
    quiet_s: float  # without a step (or, before the first, in its open phase)
    limit_s: float  # the bar it is measured against
    first_step: bool = False  # no step yet: quiet_s is the open phase's time
    phase: str | None = None  # the open phase, where known
    phase_s: float | None = None
    idle: bool = False  # before the first step: the loop's thread was idle in its open phase


def limit_s(longest_step_ms: float | None) -> float:
    """The bar: STALL_FACTOR times the longest step so far, at least STALL_FLOOR."""
    longest = (longest_step_ms or 0.0) / 1e3
    return max(T.STALL_FACTOR.value * longest, T.STALL_FLOOR.value)


def check(t: TrainingSnapshot | None, process: ProcessSample | None = None) -> Stall | None:
    """The loop's progress, for a live process (None: exited, or nothing known yet). process: the
    job's processes, whose loop thread's CPU tells a blocked loop from a busy one before its first
    step (unknown: only a wait counts there)."""
    if t is None or t.state != "alive":
        return None
    now = t.now
    phase, phase_s = (now.phase, now.phase_s) if now is not None else (None, None)
    bar = limit_s(t.longest_step_ms)
    if t.since_step_s is not None and t.steps > 0:
        return Stall(stalled=t.since_step_s > bar, quiet_s=t.since_step_s, limit_s=bar, phase=phase,
                     phase_s=phase_s)
    if now is None:
        return None
    quiet = min(now.phase_s, t.uptime_s) if t.uptime_s > 0 else now.phase_s  # (no older than the probe)
    idle = loop_idle(process)
    return Stall(stalled=quiet > bar and (now.phase in WAITS or idle), quiet_s=quiet, limit_s=bar,
                 first_step=True, phase=phase, phase_s=phase_s, idle=idle and now.phase not in WAITS)


def loop_idle(process: ProcessSample | None) -> bool:
    """The loop's thread used under STALL_IDLE_CPU of a core, time waiting for a core counted as
    use (a busy machine's computing thread is not idle); False when it was not read."""
    if process is None or not process.alive or process.loop_cpu is None:
        return False
    return process.loop_cpu + (process.loop_cpu_wait or 0.0) < T.STALL_IDLE_CPU.value


def rank_check(r: RankRow) -> bool:
    """Is this rank stalled (from its row)?"""
    if r.state != "alive" or r.now_phase is None:
        return False
    bar = limit_s(r.longest_step_ms)
    if r.since_step_s is not None and r.steps > 0:
        return r.since_step_s > bar
    return r.now_phase in WAITS and (r.now_phase_s or 0.0) > bar


def culprits(ranks: list[RankRow]) -> tuple[list[RankRow], list[RankRow]]:
    """For a job whose ranks are stalled: (the ranks the others wait for, the ranks that wait). A
    rank waiting on others is in a collective (gloo blocks in it) or in a sync behind one (NCCL's
    queued collective makes the GPU, then the host, wait); a rank elsewhere while others wait holds
    them. When every rank waits, the one behind is the one whose step is lowest (it never reached
    the collective the others are past); when all are level, the one missing is on another node."""
    live = [r for r in ranks if r.state == "alive" and r.now_phase is not None]
    waiting = [r for r in live if r.now_phase in WAITING_ON_PEERS]
    exited = [r for r in ranks if r.state != "alive"]
    holding = [r for r in live if r.now_phase not in WAITING_ON_PEERS]
    if waiting and (holding or exited):
        return holding + exited, waiting
    steps = {r.steps for r in live}
    if len(steps) > 1:
        behind = [r for r in live if r.steps == min(steps)]
        return behind, [r for r in live if r not in behind]
    return exited, waiting
