"""The memory view (m): the allocator's panels (ui/panels/memory.py); M anywhere, or c here, takes
a memory capture."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from ...capture.client import MEMORY_STEPS
from ...monitor.state import View
from ..panels.memory import capture_text, memory_panel
from ..widgets import Keys, Panel
from .base import ViewScreen


class MemoryScreen(ViewScreen):
    BINDINGS = [Binding("escape,m", "app.pop_screen", "back"), Binding("c", "app.memory_capture", "memory capture")]

    def compose(self) -> ComposeResult:
        yield Static(Text(f" GPU memory (c: capture the allocator's history for {MEMORY_STEPS} steps, esc: back)",
                          "bold"))
        with VerticalScroll():
            yield Panel(id="memory", classes="box")
            yield Static(Text("Memory capture", "bold"), classes="title")
            yield Panel(id="memory-capture", classes="box")
        yield Keys()

    def show_view(self, view: View, label: str) -> None:
        panel = self.query_one("#memory", Panel)
        panel.show(memory_panel(view, panel.text_width))
        self.query_one("#memory-capture", Panel).show(capture_text(view))
