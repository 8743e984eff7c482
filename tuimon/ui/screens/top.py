"""`tuimon top`."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll

from ...monitor.state import View
from ..panels.top import top_header, top_panel
from ..widgets import Keys, Panel
from .base import ViewScreen


class TopScreen(ViewScreen):
    """`tuimon top`: every GPU with its processes (user, memory, SM share, command), and the host."""

    def compose(self) -> ComposeResult:
        yield Panel(id="header")
        with VerticalScroll(id="body"):
            yield Panel(id="gpus", classes="box")
        yield Keys()

    def on_mount(self) -> None:
        self.tuimon.redraw(mounting=True)  # (its first paint holds the numbers)

    def show_view(self, view: View, label: str) -> None:
        head = self.query_one("#header", Panel)
        head.show(top_header(view, label, head.text_width))
        gpus = self.query_one("#gpus", Panel)
        gpus.show(top_panel(view, gpus.text_width))
