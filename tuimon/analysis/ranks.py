"""The ranks of a job side by side: which one straggles, and how much of the step the job spends
in collectives. Pure: rank rows in, numbers out."""

from __future__ import annotations

from statistics import median as _median

from ..model import RankRow, Straggler
from . import thresholds as T


def _measured(rows: list[RankRow]) -> list[RankRow]:
    return [r for r in rows if r.state == "alive" and r.own_ms is not None and r.window_steps >= T.MIN_STEPS.value]


def straggler(rows: list[RankRow]) -> Straggler | None:
    """The rank with the longest own work per step against the median of the others' (None with
    fewer than two measured ranks). Ranks wait for each other in collectives, so their step times
    match; their own work (the step less the waits) does not. `slower`: its phases (ms/step) beyond
    the others' median, largest first; the wait itself (comm) left out."""
    ranked = sorted(_measured(rows), key=lambda r: r.own_ms)
    if len(ranked) < 2:
        return None
    slow, others = ranked[-1], ranked[:-1]
    ref = _median([r.own_ms for r in others])
    if ref <= 0:
        return None
    deltas = {}
    for phase, ms in slow.phases.items():
        if phase == "comm":
            continue
        d = round(ms - _median([r.phases.get(phase, 0.0) for r in others]), 2)
        if d > 0:
            deltas[phase] = d
    slower = dict(sorted(deltas.items(), key=lambda kv: -kv[1]))
    return Straggler(slow.rank, slow.pid, round(slow.own_ms / ref, 3), round(slow.own_ms, 2), round(ref, 2), slower)


def comm_share(rows: list[RankRow]) -> float | None:
    """The job's share of step time in collectives: the ranks' mean (None: no rank measured any)."""
    shares = [r.comm_share for r in _measured(rows) if r.comm_share is not None]
    return round(sum(shares) / len(shares), 4) if shares else None
