"""sync-bound: the loop blocks on device-to-host syncs (>= 20%, or >= 5% with the GPU mostly idle
and no part of the step 4x larger): host and GPU take turns."""

from __future__ import annotations

from .. import thresholds as T
from .base import (
    Check,
    Context,
    Rule,
    Verdict,
    VerdictClass,
    at_least,
    below,
    margin,
    outranked,
    percent,
    share,
)


def rule(c: Context) -> Rule:
    s = c.e.sync
    high = at_least("time blocked in syncs", s.share, T.SYNC_HIGH)
    moderate = at_least("time blocked in syncs", s.share, T.SYNC_MODERATE)
    idle = below(c.busy_name, c.busy, T.GPU_IDLE, percent)
    not_busy = below(c.busy_name, c.busy, T.GPU_BUSY, percent)
    ranked = outranked(c.e, "sync", s.share)
    fired = bool(not_busy.passed is not False
                 and (high.passed or (moderate.passed and idle.passed and ranked.passed is not False)))
    checks = [high, Check(what="...or", value="", test=f">= {T.SYNC_MODERATE.show()} with the GPU idle, not outranked",
                          passed=None), idle, ranked, not_busy]
    n = f"{s.per_step:.0f} per step" if s.per_step is not None else "none seen"
    return Rule(code="sync-bound", title="Sync-bound (host and GPU take turns)", fired=fired, checks=checks,
                why=f"blocked {share(s.share)} of the step in syncs ({n}) with {c.gpu_words()}" if fired
                else "syncs not measured" if s.share is None else f"syncs take {share(s.share)} of the step ({n})")


def verdict(c: Context, rules: list[Rule]) -> Verdict:
    s = c.e.sync
    # each site's own share of the step where the probe timed it (two sites at one call a step each
    # are not an even split of the sync time), its calls per step beside
    sites = ", ".join(f"{site.site} ({share(site.share) + ' of the step, ' if site.share is not None else ''}"
                      f"{site.per_step:.0f}/step)" for site in s.sites[:3])
    per = f"{s.per_step:.0f} sync{'s' if s.per_step != 1 else ''} per step" if s.per_step else "syncs"
    mean = f" ({s.mean_us:,.0f} us each)" if s.mean_us else ""
    return Verdict(code="sync-bound", headline="sync-bound",
                   evidence=f"blocked {share(s.share)} of the step in {per}{mean} · {c.gpu_words()}",
                   next_step=f"{per}{' at ' + sites if sites else ''}: the host waits for the GPU, then the GPU waits "
                             "for the host: keep values on the GPU and read them every N steps, or copy with "
                             "non_blocking=True",
                   confidence="low" if c.guessed_gpu else margin(s.share, T.SYNC_HIGH), rules=rules)


CLASS = VerdictClass(rule=rule, verdict=verdict)
