"""The captures of this session."""

from __future__ import annotations

import os

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Static

from ...capture.client import window_steps
from ...channel.text import safe_text
from ...monitor.state import View
from ..widgets import Keys, Panel
from .base import ViewScreen


class CapturesScreen(ViewScreen):
    """The captures of this session, newest first, with what the newest found."""

    BINDINGS = [Binding("escape,l", "app.pop_screen", "back")]

    def compose(self) -> ComposeResult:
        yield Static(Text(" Captures of this session (esc: back)", "bold"))
        yield DataTable(id="captures", cursor_type="row")
        yield Panel(id="capture-summary", classes="box")
        yield Keys()

    def on_mount(self) -> None:
        t = self.query_one(DataTable)
        for label in ("#", "kind", "state", "steps", "file", "message"):
            t.add_column(label, key=label)

    def show_view(self, view: View, label: str) -> None:
        t = self.query_one(DataTable)
        t.clear()
        for c in reversed(view.captures):
            t.add_row(str(c.seq), c.kind, c.state,
                      window_steps(c.state, c.first_step, c.last_step).removeprefix("steps "),
                      Text(safe_text(os.path.basename((c.summary.file if c.summary else None) or c.path), 60)),
                      Text(safe_text(c.message, 60)))
        done = [c.summary for c in view.captures if c.summary is not None]
        if done:
            s = done[-1]
            lines = ([s.file or ""] + ([s.error] if s.error else []) + s.lines)
            if s.ncu_commands:  # (kept whole: a command cut short cannot be pasted)
                lines += ["one launch of each top kernel in Nsight Compute (a new run of the job):"] + s.ncu_commands
        else:
            lines = ["no finished capture yet (c on the main screen)"]
        self.query_one("#capture-summary", Panel).show(Text("\n".join(safe_text(str(x), 4000 if str(x).startswith("ncu ")
                                                                                    else 120) for x in lines)))
