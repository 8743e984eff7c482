"""memory-growth: the live tensors (cuda.allocated) rise along a straight line over the newest
minute of the allocator's reads, the high-water mark rises with them, and at that rate they reach
the cap (set_per_process_memory_fraction, else the device's memory) within 10 minutes: the job
will die of out-of-memory, whatever its speed. The rate a step and a minute, the cap, when, and
where kept tensors come from. (analysis/memory.py growth: the line; thresholds.py: why these bars.)"""

from __future__ import annotations

from ...model import Memory
from ...model.units import human_bytes
from .. import memory as mem
from .. import thresholds as T
from .base import Check, Context, Rule, Verdict, VerdictClass, at_least, below, margin


def duration(s: float | None) -> str:
    """'~40 s', '~3 min', '~1.5 h'."""
    if s is None:
        return "n/a"
    if s < 90:
        return f"~{s:.0f} s"
    return f"~{s / 60:.0f} min" if s < 90 * 60 else f"~{s / 3600:.1f} h"


def cap_words(m: Memory) -> str:
    """What the cap is: the job's own (a per-process memory fraction), or the device's memory."""
    return "set_per_process_memory_fraction" if m.limit else "the device's memory"


def rule(c: Context) -> Rule:
    m = c.e.gpu.memory
    g = m.growth if m else None
    window = T.MEMORY_GROWTH_WINDOW.show()
    reads = at_least(f"reads of the live bytes (cuda.allocated) in the newest {window}", g.reads if g else None,
                     T.MEMORY_GROWTH_READS, lambda v: "n/a" if v is None else f"{v:.0f}")
    fit = at_least("a straight line's fit to them against time (R²)", g.fit if g and g.rate is not None else None,
                   T.MEMORY_GROWTH_FIT, lambda v: "n/a" if v is None else f"{v:.2f}")
    ratio = g.peak_rate / g.rate if g and g.rate and g.rate > 0 and g.peak_rate is not None else None
    peak = Check(what="the high-water mark's rate over the newest third, of the live bytes'",
                 value="n/a" if ratio is None else f"{ratio:.2f}x", test=f">= {T.MEMORY_GROWTH_PEAK.show()}",
                 passed=None if ratio is None else ratio >= T.MEMORY_GROWTH_PEAK.value, source=T.MEMORY_GROWTH_PEAK.source)
    full = mem.full_in_s(m) if m else None
    cap = f"the cap ({cap_words(m)})" if m else "the cap"
    growing = g is not None and g.rate is not None and g.rate > 0
    horizon = below(f"time for the high-water mark to reach {cap} at this rate", full if growing else None,
                    T.MEMORY_GROWTH_HORIZON, duration)
    if not growing and g is not None and g.rate is not None:
        horizon = Check(what=horizon.what, value="never (not growing)", test=horizon.test, passed=False,
                        source=horizon.source)
    checks = [reads, fit, peak, horizon]
    if m is None:
        why = "no allocator gauges (a job on the CPU, or none read yet)"
    elif g is None or g.rate is None:
        why = "no line through the live bytes yet (fewer than two reads, or a recording made before tuimon drew one)"
    else:
        why = (f"{g.rate * 60 / mem.GIB:+.2f} GiB/min over {g.span_s:.0f} s (R² {g.fit:.2f})"
               + (f": the cap in {duration(full)}" if growing and full is not None else ""))
    return Rule(code="memory-growth", title="Memory growth (the live tensors rise toward the cap)",
                fired=all(ch.passed for ch in checks), checks=checks, why=why)


def verdict(c: Context, rules: list[Rule]) -> Verdict:
    """The rate, the cap and when it is reached; where tensors kept across steps come from."""
    m = c.e.gpu.memory
    assert m is not None and m.growth is not None and m.growth.rate is not None  # (the rule fired on them)
    g, rate = m.growth, m.growth.rate
    full = mem.full_in_s(m)
    cap = m.capacity or 0
    per_step = f"+{human_bytes(int(g.per_step))} a step (+{human_bytes(int(rate * 60))}/min)" if g.per_step and g.per_step > 0 \
        else f"+{human_bytes(int(rate * 60))}/min"
    parts = [f"{per_step}, {(g.allocated or 0) / mem.GIB:.1f} of {cap / mem.GIB:.1f} GiB ({cap_words(m)})"]
    if g.peak is not None:
        parts.append(f"peak {human_bytes(g.peak)}")
    parts.append(f"a straight line through {g.reads} reads over {g.span_s:.0f} s (R² {g.fit:.2f})")
    step = ("tensors kept from step to step: a loss or output appended to a list without .item() or .detach() (each "
            "keeps its step's graph), a list, dict or cache that only grows, a hook that stores activations; M (or "
            "`tuimon capture PID --memory`) records the allocator's history for a few steps "
            "(torch.cuda.memory._record_memory_history): what is still live at the end, by the line that made it")
    return Verdict(code="memory-growth", headline=f"memory growth: full in {duration(full)} at this rate",
                   evidence=" · ".join(parts), next_step=step,
                   confidence=margin(full, T.MEMORY_GROWTH_HORIZON, above=False), rules=rules)


CLASS = VerdictClass(rule=rule, verdict=verdict)
