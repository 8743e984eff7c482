"""The Textual app. make_app() is shared by the CLI, the tests and the screenshot script."""

from __future__ import annotations

import asyncio
import signal

from textual.app import App
from textual.binding import Binding
from textual.css.query import NoMatches

from ..monitor.state import MonitorState
from .screens import GpuScreen, HelpScreen, MainScreen, RangesScreen


class TuimonApp(App):
    CSS_PATH = "tuimon.tcss"
    TITLE = "tuimon"
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("p", "pause", "pause"),
        Binding("r", "ranges", "ranges"),
        Binding("g", "gpu", "GPU detail"),
        Binding("c", "capture", "capture"),
        Binding("question_mark", "help", "help"),
    ]

    def __init__(self, session, label: str, state: MonitorState | None = None, ansi_color: bool = True):
        # The terminal's own palette and background: fits the user's theme, and shorter escape
        # sequences (fewer bytes per second over SSH).
        super().__init__(ansi_color=ansi_color)
        self.session = session
        self.label = label
        self.state = state or MonitorState()
        self.paused = False
        self._drawn_version = -1

    def on_mount(self) -> None:
        self.push_screen(MainScreen())
        try:  # SSH dropped: the terminal is gone, so exit instead of spinning
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.exit)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
        if self.session is not None:
            self.session.start(self._entries_from_thread)
        self.call_after_refresh(self.redraw)

    def on_unmount(self) -> None:
        if self.session is not None:
            self.session.stop()

    def _entries_from_thread(self, entries) -> None:
        try:
            self.call_from_thread(self.apply_entries, entries)
        except RuntimeError:
            pass  # the app is shutting down

    def apply_entries(self, entries) -> None:
        for source, data in entries:
            self.state.apply(source, data)
        if not self.paused:
            self.redraw()

    def redraw(self) -> None:
        screen = self.screen
        if not hasattr(screen, "show_view") or not screen.is_mounted:
            return
        try:
            with self.batch_update():
                screen.show_view(self.state.view(self.paused), self.label)
        except NoMatches:
            return  # the screen is still composing; the next update draws it
        self._drawn_version = self.state.version

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.redraw()

    def action_ranges(self) -> None:
        self.push_screen(RangesScreen())
        self.call_after_refresh(self.redraw)

    def action_gpu(self) -> None:
        self.push_screen(GpuScreen())
        self.call_after_refresh(self.redraw)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_capture(self) -> None:
        self.notify("c is reserved for capture windows (Nsight Systems / torch.profiler), "
                    "which arrive in the next version", title="capture", timeout=4)

    def pop_screen(self):
        result = super().pop_screen()
        self.call_after_refresh(self.redraw)
        return result


def make_app(session, label: str, state: MonitorState | None = None) -> TuimonApp:
    return TuimonApp(session, label, state)
