"""A process without the probe: its main thread's lines, sampled from outside."""

from __future__ import annotations

from rich.text import Text

from ...analysis import thresholds as T
from ...channel.text import safe_text
from ...model import OutsideLines
from ..format import fit, how_words


def outside_words(o: OutsideLines) -> str:
    """How the lines from outside were sampled: 'main thread (MainThread) of PID 812, sampled from
    outside by py-spy 0.4.2 at 25 Hz · 480 samples over the last 10 s'."""
    name = f" ({safe_text(o.thread, 30)})" if o.thread else ""
    span = f" · {o.samples:,} samples over the last {o.seconds:.0f} s" if o.samples else ""
    others = f" · {o.threads - 1} other Python thread{'s' if o.threads > 2 else ''}" if o.threads > 1 else ""
    return (f"main thread{name} of PID {o.pid}, sampled from outside by {safe_text(o.tool, 40)} at {o.rate_hz:g} Hz"
            f"{span}{others}")


def outside_panel(o: OutsideLines, width: int, lines: int = 3) -> Text:
    """No probe: the main thread's top lines sampled from outside (py-spy), or why there are none."""
    if o.state == "failed":
        out = Text("hot lines: ", "bold yellow")
        out.append(safe_text(o.why, 600))
        return out
    if not o.hot_lines or o.samples < T.HOT_MIN_SAMPLES.value:
        return Text(safe_text(o.why, 300) if o.why else f"{o.samples} samples of the main thread so far", "dim")
    out = Text(fit(outside_words(o), max(20, width)), "dim")
    for h in o.hot_lines[:lines]:
        out.append("\n")
        out.append(fit(f"{h.share:>4.0%}  {h.line}", max(20, width - 26)))
        out.append(f"  {how_words(h)}", "dim")
    out.append("\noutside: no phases without the probe · h: every line · the step's anatomy needs `tuimon run`", "dim")
    return out
