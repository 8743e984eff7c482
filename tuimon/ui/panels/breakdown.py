"""Where the step goes: its phases as a bar, the hottest lines, collectives and syncs."""

from __future__ import annotations

from rich.text import Text

from ...analysis import thresholds as T
from ...channel.text import safe_text
from ...model import HotLine, SyncSite, TrainingSnapshot
from ...monitor.state import View
from ..format import fit, how_words
from ..style import PHASE_STYLE
from .outside import outside_panel

FILLS = "█▓▒░▚▞▙▟"  # without colour (NO_COLOR) each part of the bar gets its own fill


def stacked_bar(parts: list[tuple[str, float, str]], width: int, plain: bool) -> Text:
    """(label, share, style) as one bar of width cells, and a legend that wraps between items.
    Cumulative rounding: one share moving moves only its own edges."""
    out, cum, start = Text(), 0.0, 0
    for k, (_, frac, style) in enumerate(parts):
        cum += frac
        end = min(width, round(cum * width))
        out.append((FILLS[k % len(FILLS)] if plain else "█") * (end - start), style)
        start = end
    out.append("\n")
    used = 0
    for k, (label, frac, style) in enumerate(parts):
        item = f"{FILLS[k % len(FILLS)] if plain else '■'} {label} {frac:.0%}   "
        if used and used + len(item) > width + 2:
            out.append("\n")
            used = 0
        out.append(item[:2], style)
        out.append(item[2:-len(f" {frac:.0%}   ")])
        out.append(f" {frac:.0%}   ", "bold")
        used += len(item)
    return out


def breakdown_panel(view: View, width: int, plain: bool = False) -> Text:
    """The step's phases on the loop thread (with the user's own top-level ranges beside them),
    or, from a probe without phases, data wait, top-level ranges and the unaccounted rest."""
    t = view.training
    if t is None:
        return outside_panel(view.outside, width) if view.outside is not None else Text("needs the probe (see above)", "dim")
    bar_w = max(10, width - 2)
    if t.phases:
        out = stacked_bar([(p.name, p.share, PHASE_STYLE.get(p.name, "white")) for p in t.phases], bar_w, plain)
        per_step = "  ".join(f"{p.name} {p.mean_ms:.1f}" for p in t.phases)
        out.append(f"\nms per step: {per_step}", "dim")
        ranges = [r for r in t.ranges if r.depth == 0 and r.share]
        if ranges:
            out.append("\nyour ranges: ", "dim")
            out.append(" · ".join(f"{safe_text(r.name, 30)} {r.share:.0%}" for r in ranges[:8]))
        for h in top_lines(t, 2):  # (h: all of them)
            out.append("\n")
            out.append(line_text(f"{h.phase} {h.share:.0%}: ", h, max(20, width - 12)))
            out.append(f"  {how_words(h)}", "dim")
    elif t.breakdown:
        colors = ["yellow", "green", "magenta", "blue", "cyan", "red", "white"]
        parts = [("data wait" if name == "data_wait" else safe_text(name, 30), frac,
                  "grey50" if name == "unaccounted" else colors[k % len(colors)])
                 for k, (name, frac) in enumerate(t.breakdown.items())]
        out = stacked_bar(parts, bar_w, plain)
    else:
        return Text("not enough steps yet", "dim")
    if t.comm is not None:
        gpu = (f"{t.comm.gpu_ms:.1f} ms/step waiting on the GPU (CUDA events), " if t.comm.gpu_ms is not None else "")
        out.append(f"\ncollectives: {gpu}{t.comm.host_ms:.1f} ms on the loop thread · {t.comm.share:.0%} of the step · "
                   f"{t.comm.mb_per_step or 0:,.0f} MB per step", "dim")
    if t.syncs and t.syncs.per_step:
        out.append(f"\nsyncs: {t.syncs.per_step:,.1f} per step, {t.syncs.mean_us:,.0f} us each", "dim")
        if t.syncs.top:
            out.append(" · " + sync_sites_words(t.syncs.top[:3]), "dim")
    if t.dropped:
        out.append(f"\n{t.dropped:,} records dropped (ring overrun)", "yellow")
    return out


def sync_sites_words(sites: list[SyncSite]) -> str:
    """The sync call sites: each one's own share of the step where the probe timed them ("blocked
    train.py:41 31% · train.py:50 16%", no wider than the per-step counts it replaces), else each
    one's calls per step ("train.py:41 1.0/step")."""
    if all(s.share is not None for s in sites):
        return "blocked " + " · ".join(f"{safe_text(s.site, 50)} {s.share or 0:.0%}" for s in sites)
    return " · ".join(f"{safe_text(s.site, 50)} {s.per_step:,.1f}/step" for s in sites)


def line_text(prefix: str, h: HotLine, width: int) -> Text:
    """prefix and the line in width cells; a library's line with the job's own line that led there
    beside it, which is kept whole where the library's line is cut ("… · from hf_train.py:40")."""
    if not h.context:
        return Text(fit(prefix + h.line, width))
    tail = fit(f" · from {h.context}", max(width // 2, 1))
    out = Text(fit(prefix + h.line, max(width - len(tail), 1)))
    out.append(tail)
    return out


def top_lines(t: TrainingSnapshot | None, n: int) -> list[HotLine]:
    """The loop thread's n hottest lines of the window, once there are samples enough to say."""
    if t is None or t.samples < T.HOT_MIN_SAMPLES.value:
        return []
    return sorted(t.hot_lines, key=lambda h: -h.share)[:n]
