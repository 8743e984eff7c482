"""From outside: (no probe, `attach`) the GPU's activity (NVML) and the main thread's hot lines
(py-spy): the GPU's unit when it is busy, where the host holds it back when it idles; never a wait
for steps that will not come."""

from __future__ import annotations

from ...model.vocab import Confidence
from .. import thresholds as T
from ..anatomy import how_of
from . import gpu_unit
from .base import Check, Context, Rule, Verdict, VerdictClass, margin, share
from .evidence import Evidence

ANATOMY = "the loop's anatomy (data, forward, backward, optimizer, syncs) needs `tuimon run`"


def rule(c: Context) -> Rule:
    """No channel (`attach` to a job started without the probe): the verdict comes from what can be
    seen from outside, the GPU's activity (NVML) and the main thread's lines (py-spy)."""
    e, o = c.e, c.e.outside
    lines = Check(what="main thread samples (py-spy)", value=str(o.samples), test=f">= {T.HOT_MIN_SAMPLES.show()}",
                  passed=o.samples >= T.HOT_MIN_SAMPLES.value if o.sampled else None, source=T.HOT_MIN_SAMPLES.source)
    fired = not e.has_channel and o.sampled
    return Rule(code="outside", title="From outside (no probe: NVML and py-spy)", fired=fired,
                checks=[c.busy_check(), lines] if not e.has_channel else [],  # (with the probe: nothing to check)
                why=f"no channel: {c.gpu_words()}, main thread {_main_words(e) or 'not sampled yet'}; " + ANATOMY
                if fired else "the loop's own timings are read" if e.has_channel else "not sampled from outside")


def _main_words(e: Evidence) -> str:
    """'62% at train.py:41 in main (in a native call)', from the main thread's hottest line."""
    if not e.host.hot:
        return ""
    top = e.host.hot[0]
    word, of = how_of(top)
    return f"{share(top.share)} at {top.line} ({word}{'' if of >= 0.95 else f' {of:.0%}'})"


UNITS = (("memory-bound", gpu_unit.verdict_memory), ("compute-bound", gpu_unit.verdict_compute),
         ("healthy", gpu_unit.verdict_healthy))


def verdict(c: Context, rules: list[Rule]) -> Verdict:
    e = c.e
    fired = {r.code for r in rules if r.fired}
    main = _main_words(e)
    loop = e.host.loop_cpu
    cpu = f" · main thread CPU {loop:.0f}%" if loop is not None else ""
    why = e.outside.why
    seen = f" · main thread {main}{cpu}" if main else (f" · hot lines: {why}" if why else cpu)
    gpu = f"{c.gpu_words()}{'' if c.busy is None else ' (NVML)'}"
    for code, words in UNITS:
        if code in fired:
            v = words(c, rules)
            confidence: Confidence = "low" if v.confidence == "low" else "medium"  # (no loop timings beside it)
            return Verdict(code=v.code, headline=v.headline, evidence=f"{gpu}{c.units()}{seen}",
                           next_step=f"{v.next_step}; {ANATOMY}", confidence=confidence, rules=rules)
    if c.busy is None and not main:
        return Verdict(code="waiting", headline="no loop timings", evidence=f"no channel, no GPU activity seen{seen}",
                       next_step=f"{ANATOMY}; GPU and process numbers need neither", confidence="low", rules=rules)
    if c.busy is not None and c.busy >= T.GPU_IDLE.value:
        return Verdict(code="mixed", headline="no single bottleneck (from outside)", evidence=f"{gpu}{seen}",
                       next_step=f"the GPU is busy part of the time; {ANATOMY}, and its captures (c)",
                       confidence="low", rules=rules)
    headline = "host-bound: the GPU waits (from outside)" if c.busy is not None else "host-bound: no GPU seen (from outside)"
    confidence = "low" if c.busy is None or not main else margin(c.busy, T.GPU_IDLE, above=False)
    return Verdict(code="host-bound", headline=headline, evidence=f"{gpu}{seen}",
                   next_step=_next_step(e, c.busy is not None),
                   confidence="medium" if confidence == "high" else confidence, rules=rules)


def _next_step(e: Evidence, gpu: bool) -> str:
    """What the main thread's top line says to do, from how the thread was there."""
    idle = " while the GPU idles" if gpu else ""
    if not e.host.hot:
        return f"the host's work is not seen yet ({e.outside.why or 'no lines'}); {ANATOMY}"
    top = e.host.hot[0]
    word, _ = how_of(top)
    at = f"{top.line} ({share(top.share)} of its time)"
    if word == "Python":
        return f"the main thread runs Python at {at}{idle}: move that work off the loop, or do it every N steps; {ANATOMY}"
    if word == "in a native call":
        return (f"the main thread is in a native call at {at}{idle} (a copy or an op on the CPU): move it to the GPU or "
                f"to the DataLoader's workers; {ANATOMY}")
    return (f"the main thread is blocked at {at}{idle}: the next batch, a lock, I/O, a sleep or a wait for the GPU; "
            f"{ANATOMY} to tell which")


CLASS = VerdictClass(rule=rule, verdict=verdict)
