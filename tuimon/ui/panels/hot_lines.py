"""The h screen's text: every phase's hottest lines."""

from __future__ import annotations

from rich.text import Text

from ...monitor.state import View
from ..format import fit
from .breakdown import line_text
from .outside import outside_panel, outside_words


def hot_lines_text(view: View, width: int) -> Text:
    """Every phase's hottest lines (the h screen): where the loop thread's samples fell."""
    t = view.training
    if t is None:
        return _outside_lines_text(view, width)
    if not t.hot_lines:
        return Text("no samples yet: the probe samples the loop thread 50 times a second (TUIMON_SAMPLE_HZ)", "dim")
    out = Text(f"{t.samples:,} samples of the loop thread over the window · share of its time · share of the phase · "
               "how it was there\n", "dim")
    phase = None
    for h in t.hot_lines:
        if h.phase != phase:
            phase = h.phase
            out.append(f"\n{phase}\n", "bold")
        out.append(f"  {h.share:>4.0%} {h.phase_share:>5.0%}  ")
        out.append(line_text("", h, max(20, width - 46)))
        out.append(f"  Python {h.python:.0%} · native {h.native:.0%} · blocked {h.waiting:.0%}\n", "dim")
    return out


def _outside_lines_text(view: View, width: int) -> Text:
    """The h screen without the probe: every line of the main thread sampled from outside."""
    o = view.outside
    if o is None:
        return Text("needs the probe (tuimon run), or `tuimon attach` to sample the main thread from outside", "dim")
    if o.state == "failed" or not o.hot_lines:
        return outside_panel(o, width)
    out = Text(outside_words(o) + " · share of its time · how it was there\n", "dim")
    out.append("\noutside: no phases without the probe\n", "bold")
    for h in o.hot_lines:
        out.append(f"  {h.share:>4.0%}  ")
        out.append(fit(h.line, max(20, width - 46)))
        out.append(f"  Python {h.python:.0%} · native {h.native:.0%} · blocked {h.waiting:.0%}\n", "dim")
    if o.errors:
        out.append(f"\n{o.errors:,} samples py-spy could not read (a stack changing under it) left out", "dim")
    return out
