"""straggler: (2+ ranks) one rank's own work (its step less its waits in collectives) is >= 1.43x
the others': they wait for it, whatever their own anatomy says."""

from __future__ import annotations

from .. import thresholds as T
from .base import Context, Rule, Verdict, VerdictClass, at_least, margin, share

FIX: dict[str, str] = {  # by the phase it is slowest in, beyond the others (comm: the wait itself)
    "data": "its batches come slower: its DataLoader workers, its share of the data, or its storage",
    "copy": "its host-to-device copies take longer: pinned memory (DataLoader pin_memory=True) and non_blocking=True "
            "on that rank, or a slower PCIe link (g)",
    "forward": "uneven work (batch or sequence sizes per rank) or a slower GPU: compare its SM activity, clocks and "
               "throttle reasons (g)",
    "backward": "uneven work (batch or sequence sizes per rank) or a slower GPU: compare its SM activity, clocks and "
                "throttle reasons (g)",
    "optimizer": "its optimizer step is slower: uneven parameter shards, or a slower GPU (g)",
    "sync": "it blocks in device-to-host syncs the others do not make (logging or metrics on one rank)",
    "other": "time outside the model on that rank only (Python, I/O, logging, checkpointing or evaluation on one "
             "rank): spread it, or move it off the step",
}


def rule(c: Context) -> Rule:
    ranks, s = c.e.ranks.count, c.e.ranks.straggler
    check = at_least("slowest rank's own work / the others'", s.ratio if s else None, T.STRAGGLER,
                     lambda v: "n/a" if v is None else f"{v:.2f}x")
    if s is None:
        why = "one process" if ranks < 2 else "fewer than two ranks with enough steps"
    else:
        measured = s.others_measured_ms
        why = (f"rank {s.rank} works {s.own_ms:.1f} ms/step, the others {s.others_ms:.1f}"
               + (f" (they measure {measured:.1f}, which holds what their wait does to them: analysis/ranks.py)"
                  if measured is not None and measured - s.others_ms >= 0.05 else "")
               + f": {s.ratio:.2f}x")
    return Rule(code="straggler", title="Straggler (one rank holds the others back)",
                fired=ranks >= 2 and bool(check.passed), checks=[check], why=why)


def verdict(c: Context, rules: list[Rule]) -> Verdict:
    s = c.e.ranks.straggler
    assert s is not None  # (the rule fired on its ratio)
    top = next(iter(s.slower.items()), None)
    where = f" · its {top[0]} +{top[1]:.1f} ms/step" if top else ""
    fix = FIX.get(top[0], "") if top else ""
    return Verdict(code="straggler", headline=f"straggler: rank {s.rank}, {s.ratio:.1f}x the others' own work",
                   evidence=f"rank {s.rank} works {s.own_ms:.1f} ms/step, the others {s.others_ms:.1f} and wait for it "
                            f"in collectives{where} · job comm {share(c.e.comm.share)}",
                   next_step=f"rank {s.rank}: {fix}" if fix else f"rank {s.rank} is slower in every phase: compare its "
                             "GPU (g) and its CPU",
                   confidence=margin(s.ratio, T.STRAGGLER), rules=rules)


CLASS = VerdictClass(rule=rule, verdict=verdict)
