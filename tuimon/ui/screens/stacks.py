"""Every thread's stack in the training process."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from ...channel.text import safe_text
from ...monitor.state import View
from ..format import seconds
from ..widgets import Keys, Panel
from .base import ViewScreen


class StacksScreen(ViewScreen):
    """Every thread's stack in the training process, as py-spy dump prints them: asked for when
    the loop stalls, or now with t."""

    BINDINGS = [Binding("escape", "app.pop_screen", "back"), Binding("t", "again", "ask again")]

    @property
    def _live(self) -> bool:
        return self.tuimon.live

    def compose(self) -> ComposeResult:
        yield Static(Text(" Threads of the training process" + (" (t: read them again, esc: back)" if self._live else
                                                                 ", as recorded (esc: back)"), "bold"))
        with VerticalScroll():
            yield Panel(id="stacks", classes="box")
        yield Keys()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """t asks the probe again: a replay has none to ask (and the footer leaves it out)."""
        return self._live if action == "again" else True

    def action_again(self) -> None:
        self.tuimon.action_stacks()

    def show_view(self, view: View, label: str) -> None:
        t = view.training
        panel = self.query_one("#stacks", Panel)
        live = self._live
        if t is None:
            panel.show(Text("no channel: the threads' stacks need the probe (tuimon run)", "dim"))
        elif t.stacks is None and live:
            panel.show(Text("no stacks read yet: tuimon asks for them when the loop stalls (t: now); the probe "
                            "answers within a second", "dim"))
        elif t.stacks is None:
            panel.show(Text("no stacks in the recording up to here: the live monitor asks the probe for them when the "
                            "loop stalls (or on t), and none had been read", "dim"))
        else:
            ago = f"read {seconds(t.stacks_age_s or 0)} ago" if live else \
                f"read {seconds(t.stacks_age_s or 0)} before this moment of the recording"
            out = Text(f"{ago}\n\n", "dim")
            out.append("\n".join(safe_text(line, 300) for line in t.stacks.splitlines()))
            panel.show(out)
