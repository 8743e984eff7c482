"""The job against its baseline."""

from __future__ import annotations

import os

from rich.text import Text

from ...analysis import thresholds as T
from ...channel.text import safe_text
from ...model import Comparison
from ...model.vocab import ComparisonState
from ..format import COMPARISON_BADGE, duration, fit, p_words, peak_memory_words, step_time, vs
from ..style import COMPARISON_STYLE


def baseline_panel(c: Comparison, width: int = 0) -> Text:
    """The job against its baseline: the alert and its size, then what moved (the phase that grew
    most first). Each line is cut to width (0: not cut), so the panel keeps its height and a
    changed number re-sends only its cells. The p-value is shown where it decided something."""
    out = Text()
    memory_grew = c.peak_memory is not None and c.peak_memory.grew
    state: ComparisonState = "regression" if c.regressed else c.state
    head = COMPARISON_BADGE[state]
    out.append(f" {head} ", COMPARISON_STYLE[state] + " reverse")
    out.append("  ")
    room = (width - len(head) - 4) if width else 10**6
    name = os.path.basename(c.file) or c.file
    held = "" if not c.since_s else f" for {c.since_s:.0f} s" if c.since_s < 120 else f" for {duration(c.since_s)}"
    alert = ""
    if memory_grew:
        alert = f"{peak_memory_words(c)} from {name}{held} (bar: {T.PEAK_MEMORY_FACTOR.show()}); step time: "
        held = ""
    if c.halted is not None:  # (no progress: said first, the step time's state after it)
        alert = f"no progress, against {name}: {safe_text(c.halted, 200)}; step time: "
        held = ""
    if c.state == "collecting":
        lead = alert or f"{name}: "
        line = fit(lead + c.progress + _warmup_words(c), room)
        out.append(line[:len(lead)], "bold" if alert else "dim")
        out.append(line[len(lead):], "dim")
        # (a second line, as every state has: the panel keeps its height when the comparison starts)
        base = (f"mean step {step_time(c.baseline_mean_ms)} over {c.baseline_steps:,} steps"
                if c.baseline_mean_ms is not None else f"{c.baseline_steps:,} steps")
        out.append("\n→ ", "bold")
        out.append(fit(f"the baseline: {base}" + "".join(f"  ({n})" for n in c.notes), (width - 2) if width else 10**6),
                   "dim")
        return out
    assert c.ratio is not None and c.mean_ms is not None and c.baseline_mean_ms is not None  # (decided: set)
    change = c.ratio - 1
    if c.state == "regression":
        lead = alert + f"{change:.0%} slower than {name}{held}: "
    elif c.state == "faster":
        lead = alert + f"{-change:.0%} faster than {name}: "
    else:
        lead = alert or f"no regression from {name} (bar {T.REGRESSION_FACTOR.show()}, {T.REGRESSION_P.show()}): "
    rest = (f"mean step {vs(c.mean_ms, c.baseline_mean_ms)} ({change:+.0%}; last {c.window_s:.0f} s, "
            f"{c.window_steps:,} steps{p_words(c)})")
    line = fit(lead + rest, room)
    out.append(line[:len(lead)], "bold" if c.regressed else "")
    out.append(line[len(lead):])
    moved = []
    if c.gpu_grown is not None:
        g = c.gpu_grown
        moved.append(f"the GPU's work grew: {g.baseline_ms:.1f} → {g.now_ms:.1f} ms/step ({g.delta_ms:+.1f}, CUDA events)")
    if c.gpu_grown is not None and c.grown is not None:
        moved.append(f"the loop waits for it in {safe_text(c.grown.name, 24)} ({c.grown.delta_ms:+.1f} ms)")
    elif c.grown is not None:
        g = c.grown
        moved.append(f"{safe_text(g.name, 24)} grew most: {g.baseline_ms:.1f} → {g.now_ms:.1f} ms/step "
                     f"({g.delta_ms:+.1f})")
    if c.steps_per_s is not None and c.baseline_steps_per_s:
        moved.append(f"steps/s {c.steps_per_s:.3g} vs {c.baseline_steps_per_s:.3g}")
    for k, v in list(c.throughput_per_s.items())[:1]:
        if c.baseline_throughput_per_s.get(k):
            moved.append(f"{safe_text(k, 24)}/s {v:,.0f} vs {c.baseline_throughput_per_s[k]:,.0f}")
    if c.p50_ms is not None and c.baseline_p50_ms is not None:
        moved.append(f"p50 {vs(c.p50_ms, c.baseline_p50_ms)}")
    if c.p95_ms is not None and c.baseline_p95_ms is not None:
        moved.append(f"p95 {vs(c.p95_ms, c.baseline_p95_ms)}")
    if c.data_wait_share is not None and c.baseline_data_wait_share is not None:
        moved.append(f"data wait {c.data_wait_share:.0%} vs {c.baseline_data_wait_share:.0%}")
    if c.gpu_step_ms is not None and c.baseline_gpu_step_ms is not None and c.gpu_grown is None:
        moved.append(f"GPU step {c.gpu_step_ms:.1f} vs {c.baseline_gpu_step_ms:.1f} ms")
    if c.peak_memory is not None and not memory_grew:
        moved.append(peak_memory_words(c))
    notes = "".join(f"  ({note})" for note in c.notes)
    if moved or notes:
        out.append("\n→ ", "bold")
        line = fit(" · ".join(moved) + notes, (width - 2) if width else 10**6)
        cut = min(len(line), len(" · ".join(moved)))
        out.append(line[:cut])
        out.append(line[cut:], "yellow")
    return out


def _warmup_words(c: Comparison) -> str:
    """What the warm-up is, while it lasts."""
    if "warm-up" not in c.progress:
        return ""
    return (f": the job's first {T.REGRESSION_WARMUP_S.value:g} s and {T.REGRESSION_WARMUP_STEPS.value:g} steps "
            f"are left out, then {T.REGRESSION_BATCHES.value:g} batches of {T.REGRESSION_BATCH_S.value:g} s or a step")
