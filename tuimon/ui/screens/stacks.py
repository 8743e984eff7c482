"""Every thread's stack in the training process."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from ...channel.text import safe_text
from ...monitor.state import View
from ..format import seconds
from ..widgets import Keys, Panel

if TYPE_CHECKING:
    from ..app import TuimonApp


class StacksScreen(Screen):
    """Every thread's stack in the training process, as py-spy dump prints them: asked for when
    the loop stalls, or now with t."""

    BINDINGS = [Binding("escape", "app.pop_screen", "back"), Binding("t", "again", "ask again")]

    def compose(self) -> ComposeResult:
        yield Static(Text(" Threads of the training process (t: read them again, esc: back)", "bold"))
        with VerticalScroll():
            yield Panel(id="stacks", classes="box")
        yield Keys()

    def action_again(self) -> None:
        cast("TuimonApp", self.app).action_stacks()

    def show_view(self, view: View, label: str) -> None:
        t = view.training
        panel = self.query_one("#stacks", Panel)
        if t is None:
            panel.show(Text("no channel: the threads' stacks need the probe (tuimon run)", "dim"))
        elif t.stacks is None:
            panel.show(Text("no stacks read yet: tuimon asks for them when the loop stalls (t: now); the probe "
                            "answers within a second", "dim"))
        else:
            out = Text(f"read {seconds(t.stacks_age_s or 0)} ago\n\n", "dim")
            out.append("\n".join(safe_text(line, 300) for line in t.stacks.splitlines()))
            panel.show(out)
