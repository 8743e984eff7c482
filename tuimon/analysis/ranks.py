"""The ranks of a job side by side: which one straggles, and how much of the step the job spends
in collectives. Pure: rank rows in, numbers out."""

from __future__ import annotations

from collections.abc import Iterable

from ..model import RankRow, Straggler
from . import thresholds as T
from .summary import percentile

WORK_PHASES = ("data", "forward", "backward", "optimizer")


def _median(values: Iterable[float]) -> float:
    return percentile(sorted(values), 50)  # (statistics.median's value, without its 3 ms import)


def _measured(rows: list[RankRow]) -> list[RankRow]:
    """Ranks with enough steps in their window. A rank that exited counts with its last window (the
    monitor keeps its row until its rank comes back or it is long gone): its exit ends its window,
    it does not change it, so the others' verdict does not change class because one rank ended."""
    return [r for r in rows if r.own_ms is not None and r.window_steps >= T.MIN_STEPS.value]


def straggler(rows: list[RankRow]) -> Straggler | None:
    """The rank with the longest own work per step against the others' (None with fewer than two
    measured ranks). Ranks wait for each other in collectives, so their step times match; their own
    work (the step less the waits) does not. `slower`: its phases (ms/step) beyond the others'
    median, largest first; the wait itself (comm) left out.

    The others' own work is the tighter of two upper bounds. What they measure (their step less
    their wait) also holds what the wait does to them: NCCL kernels launched early in backward wait
    on the GPU for the straggler and hold SMs meanwhile (two H200s, rank 1 20 ms late: rank 0's
    backward 15.8 ms against rank 1's 12.2 by DDP's own timer). Where DDP's own timer is there and
    the ranks are on GPUs, that excess of their backward over the straggler's comes off. The
    straggler's own work less what it spends more in its phases holds all of the others' work when
    the ranks run the same step (DDP, FSDP: one model, equal batches), and any extra of the straggler that no host phase shows (a
    slower GPU). The second never goes below what the others' host spends in data, forward,
    backward and optimizer (a floor, for a straggler whose phases are missing or cut short). Where
    the tighter bound comes to 0 or less, what they measure stands; where that too is 0 (their
    collectives' GPU time read at or above their step: NCCL does not block the host, so the event
    pair also covers the host's work after it, up to its next sync; two H200s, a 4 MB model, rank 0's
    36.5 ms of events a step against its 33.8 ms step), the floor does: work, not a wait."""
    ranked = sorted(((r.own_ms, r) for r in _measured(rows) if r.own_ms is not None), key=lambda x: x[0])
    if len(ranked) < 2:
        return None
    (slow_ms, slow), others = ranked[-1], [r for _, r in ranked[:-1]]
    measured = _median([ms for ms, _ in ranked[:-1]])
    # (on GPUs only: on CPUs (gloo) nothing waits beside the backward to slow it, and DDP's timer there
    # times one iteration on a host as busy as the job makes it: its noise alone would move the others'
    # work and the ratio. tests/test_ranks.py: test_the_others_own_work_is_the_tighter_of_two_bounds)
    backward = [r.ddp_backward_ms for r in others if r.ddp_backward_ms is not None and r.gpu is not None]
    slowed = _median(backward) - slow.ddp_backward_ms \
        if backward and slow.ddp_backward_ms is not None and slow.gpu is not None else 0.0
    deltas = {}
    for phase, ms in slow.phases.items():
        if phase == "comm":
            continue
        d = round(ms - _median([r.phases.get(phase, 0.0) for r in others]), 2)
        if d > 0:
            deltas[phase] = d
    slower = dict(sorted(deltas.items(), key=lambda kv: -kv[1]))
    floor = _median([sum(r.phases.get(ph, 0.0) for ph in WORK_PHASES) for r in others])
    ref = min(measured - max(0.0, slowed), max(floor, slow_ms - sum(slower.values())))
    ref = ref if ref > 0 else measured if measured > 0 else floor  # (the tighter bound unusable)
    if ref <= 0:
        return None
    return Straggler(rank=slow.rank, pid=slow.pid, ratio=round(slow_ms / ref, 3),
                     own_ms=round(slow_ms, 2), others_ms=round(ref, 2), slower=slower,
                     others_measured_ms=round(measured, 2))


def comm_share(rows: list[RankRow]) -> float | None:
    """The job's share of step time in collectives: the ranks' mean (None: no rank measured any)."""
    shares = [r.comm_share for r in _measured(rows) if r.comm_share is not None]
    return round(sum(shares) / len(shares), 4) if shares else None
