"""The verdict, explained."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from ...monitor.state import View
from ..panels.explain import explain
from ..widgets import Keys, Panel
from .base import ViewScreen


class ExplainScreen(ViewScreen):
    """Why the verdict says what it says: every rule, its numbers and thresholds."""

    BINDINGS = [Binding("escape,e", "app.pop_screen", "back")]

    def compose(self) -> ComposeResult:
        yield Static(Text(" The verdict, explained (esc: back)", "bold"))
        with VerticalScroll():
            yield Panel(id="explain", classes="box")
        yield Keys()

    def show_view(self, view: View, label: str) -> None:
        panel = self.query_one("#explain", Panel)
        panel.show(explain(view.verdict, panel.text_width))
