"""A job tuimon started, once it ended: its output."""

from __future__ import annotations

from rich.text import Text

from ...channel.text import safe_text
from ...monitor.state import View


def ended_panel(view: View, lines: int = 8) -> Text:
    """A job tuimon started, once it ended: where its output went, and its last lines."""
    end = view.job_end
    if end is None or not (end.log or end.log_tail):
        return Text()
    out = Text("its output: ", "bold")
    out.append(safe_text(end.log or "(not kept)", 300))
    for line in end.log_tail[-lines:]:
        out.append("\n  " + safe_text(line, 300), "dim")
    return out
