"""Is the loop still making progress? A loop is stalled when the time since its last step is far
beyond its own history of steps: more than STALL_FACTOR times its longest step so far (its
warm-up left out), and never under STALL_FLOOR. Before its first step, a loop is stalled when it
has waited that long in one phase that waits on something else: data, a device-to-host sync, a
collective. Pure: snapshots in, a Stall out. (thresholds.py says where each number comes from.)"""

from __future__ import annotations

from ..model import RankRow, TrainingSnapshot
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


def limit_s(longest_step_ms: float | None) -> float:
    """The bar: STALL_FACTOR times the longest step so far, at least STALL_FLOOR."""
    longest = (longest_step_ms or 0.0) / 1e3
    return max(T.STALL_FACTOR.value * longest, T.STALL_FLOOR.value)


def check(t: TrainingSnapshot | None) -> Stall | None:
    """The loop's progress, for a live process (None: exited, or nothing known yet)."""
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
    return Stall(stalled=now.phase in WAITS and now.phase_s > bar, quiet_s=now.phase_s, limit_s=bar,
                 first_step=True, phase=phase, phase_s=phase_s)


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
