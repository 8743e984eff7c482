"""comm-bound: >= 10% of the step waits in collectives (the reduction is not hidden)."""

from __future__ import annotations

from .. import thresholds as T
from .base import Context, Rule, Verdict, VerdictClass, at_least, margin, share


def rule(c: Context) -> Rule:
    comm = c.e.comm.share
    check = at_least("time in collectives", comm, T.COMM_HIGH)
    return Rule(code="comm-bound", title="Communication-bound", fired=bool(check.passed), checks=[check],
                why=f"{share(comm)} of the step waits in collectives" if comm is not None else "no collectives seen")


def verdict(c: Context, rules: list[Rule]) -> Verdict:
    e = c.e
    how = "GPU time, CUDA events" if e.comm.gpu else "on the loop thread"
    mb = f" · {e.comm.mb:,.0f} MB through collectives per step" if e.comm.mb else ""
    job = f" (the mean of {e.ranks.count} ranks)" if e.ranks.count >= 2 else ""
    return Verdict(code="comm-bound", headline="comm-bound: the step waits in collectives",
                   evidence=f"{share(e.comm.share)} of the step in collectives{job} ({how}){mb} · {c.gpu_words()}",
                   next_step="the gradient reduction is not hidden behind backward: more work per reduction (a larger "
                             "batch per GPU, or gradient accumulation under no_sync()), bf16 gradient compression (a "
                             "DDP comm hook), larger buckets (bucket_cap_mb), or a faster interconnect",
                   confidence=margin(e.comm.share, T.COMM_HIGH), rules=rules)


CLASS = VerdictClass(rule=rule, verdict=verdict)
