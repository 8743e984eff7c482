"""Where the loop thread's time goes, line by line."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from ...monitor.state import View
from ..panels.hot_lines import hot_lines_text
from ..widgets import Keys, Panel
from .base import ViewScreen


class HotLinesScreen(ViewScreen):
    """Where the loop thread's time goes, line by line, per phase (the probe's sampler)."""

    BINDINGS = [Binding("escape,h", "app.pop_screen", "back")]

    def compose(self) -> ComposeResult:
        yield Static(Text(" Hot lines of the loop thread, per phase (esc: back)", "bold"), id="hot-title")
        with VerticalScroll():
            yield Panel(id="hot", classes="box")
        yield Keys()

    def show_view(self, view: View, label: str) -> None:
        if view.training is None and view.outside is not None:  # (no probe: sampled from outside)
            self.query_one("#hot-title", Static).update(
                Text(" Hot lines of the main thread, sampled from outside (esc: back)", "bold"))
        panel = self.query_one("#hot", Panel)
        panel.show(hot_lines_text(view, panel.text_width))
