"""The main screen: "is my GPU busy, and if not, why?"."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from ...analysis.verdicts import Verdict
from ...monitor.state import COLUMN_S, View
from ..panels.baseline import baseline_panel
from ..panels.breakdown import breakdown_panel
from ..panels.capture import capture_panel
from ..panels.ended import ended_panel
from ..panels.gpus import GPUS_TITLE, gpus_panel, gpus_title
from ..panels.header import header
from ..panels.now import now_line
from ..panels.probe import probe_line
from ..panels.process import process_panel
from ..panels.ranks import ranks_panel
from ..panels.status import status_line
from ..panels.steps import steps_panel
from ..panels.verdict import verdict_line
from ..widgets import Keys, Panel
from .base import ViewScreen


class MainScreen(ViewScreen):
    # Nothing takes focus: focusing the scrolling body restyles every panel in it (~20% of Textual's
    # start in a py-spy profile of the first frame on an H100), so the screen takes the body's keys.
    AUTO_FOCUS = ""
    BINDINGS = [Binding(key, f"body('{action}')", show=False) for key, action in (
        ("up", "scroll_up"), ("down", "scroll_down"), ("pageup", "page_up"), ("pagedown", "page_down"),
        ("home", "scroll_home"), ("end", "scroll_end"))]

    def compose(self) -> ComposeResult:
        yield Panel(id="header")
        yield Panel(id="status")
        yield Panel(id="verdict")
        yield Panel(id="probe")  # (`i`: the probe offered to a process attached without it)
        yield Panel(id="now")
        yield Panel(id="ended")
        yield Panel(id="baseline")
        # Section titles are their own widgets and panels have no border: a panel that changes
        # is redrawn whole, and borders would be resent with it every second.
        with VerticalScroll(id="body"):
            yield Static(Text("Ranks · * in detail below · n: next rank", "bold"), classes="title", id="ranks-title")
            yield Panel(id="ranks", classes="box")
            for wid, title in (("gpus", GPUS_TITLE),  # (gpus_title's, as the GPUs come)
                               ("steps", f"Step time · a column is the mean of {COLUMN_S} s"),
                               ("breakdown", "Where the step goes"), ("process", "Process"), ("capture", "Capture")):
                yield Static(Text(title, "bold"), classes="title", id=f"{wid}-title")
                yield Panel(id=wid, classes="box")
        yield Keys()

    def on_mount(self) -> None:
        self.tuimon.redraw(mounting=True)

    def reveal_capture(self) -> None:
        """The capture line into view: below the fold at 80x24, `c` seemed to do nothing."""
        self.query_one("#capture", Panel).scroll_visible(animate=False)

    def action_body(self, action: str) -> None:
        getattr(self.query_one("#body", VerticalScroll), f"action_{action}")()

    _window: View | None = None
    _window_at = 0.0
    _verdict_for: tuple[Verdict, int] | None = None  # (verdict, width) the verdict panel shows
    _breakdown_for: tuple[View, int, bool] | None = None  # (window view, width, plain) the breakdown shows
    _gpus_title = GPUS_TITLE

    def _window_view(self, view: View) -> View:
        """The window view: the view the window statistics are drawn from, renewed every WINDOW_S,
        or at once when the verdict or the training's presence changes. Statistics over the last 100
        steps move slowly, and each redraw is bytes to the terminal; live numbers use the newest view."""
        now, window = time.monotonic(), self._window
        if (window is None or now - self._window_at >= WINDOW_S or window.verdict.code != view.verdict.code
                or (window.training is None) != (view.training is None) or window.paused != view.paused
                or _baseline_state(window) != _baseline_state(view)):
            self._window, self._window_at = view, now
            return view
        return window

    def show_view(self, view: View, label: str) -> None:
        q = self.query_one
        window = self._window_view(view)
        head = q("#header", Panel)
        head.show(header(view, label, window=window, width=head.text_width,
                         keep_label=self.tuimon.replaying))
        status, problems = q("#status", Panel), status_line(view)
        if status.display != bool(problems):
            status.display = bool(problems)  # (a change of display lays the screen out again)
        status.show(problems)
        verdict = q("#verdict", Panel)
        drawn = self._verdict_for
        if drawn is None or drawn[0] is not window.verdict or drawn[1] != verdict.text_width:  # (fitted to the width)
            self._verdict_for = (window.verdict, verdict.text_width)
            verdict.show(verdict_line(window.verdict, verdict.text_width))
        app = self.tuimon
        probe = q("#probe", Panel)
        if probe.display != (app.probe is not None):
            probe.display = app.probe is not None
        if app.probe is not None:
            probe.show(probe_line(app.probe, probe.text_width))
        now = q("#now", Panel)
        doing = now_line(view, now.text_width)
        if now.display != bool(doing):
            now.display = bool(doing)
        now.show(doing)
        ended, words = q("#ended", Panel), ended_panel(view)
        if ended.display != bool(words):
            ended.display = bool(words)
        ended.show(words)
        base = q("#baseline", Panel)
        if base.display != (window.baseline is not None):
            base.display = window.baseline is not None
        if window.baseline is not None:  # (while collecting, its progress as it goes)
            latest = view.baseline
            collecting = latest is not None and latest.state == "collecting"
            base.show(baseline_panel(latest if latest is not None and collecting else window.baseline, base.text_width))
        ranks = q("#ranks", Panel)
        if ranks.display != (len(window.ranks) > 1):
            ranks.display = q("#ranks-title", Static).display = len(window.ranks) > 1
        if len(window.ranks) > 1:
            ranks.show(ranks_panel(window, ranks.text_width, view.training.pid if view.training else None))
        gpus, gpus_title_now = q("#gpus", Panel), gpus_title(view)
        if gpus_title_now != self._gpus_title:  # (compact, with its detail on `g`, past two GPUs)
            self._gpus_title = gpus_title_now
            q("#gpus-title", Static).update(Text(gpus_title_now, "bold"))
        gpus.show(gpus_panel(view, gpus.text_width))
        steps = q("#steps", Panel)
        steps.show(steps_panel(view, steps.text_width, window=window))
        bd = q("#breakdown", Panel)
        drawn_bd, plain = self._breakdown_for, self.app.no_color
        if drawn_bd is None or drawn_bd[0] is not window or drawn_bd[1:] != (bd.text_width, plain):
            self._breakdown_for = (window, bd.text_width, plain)  # (drawn from the window view alone)
            bd.show(breakdown_panel(window, bd.text_width, plain=plain))
        q("#process", Panel).show(process_panel(view, window=window))
        q("#capture", Panel).show(capture_panel(view, app.capture_steps, app.capture_refused))


def _baseline_state(view: View) -> tuple | None:
    return (view.baseline.state, view.baseline.regressed) if view.baseline is not None else None


WINDOW_S = COLUMN_S  # window statistics are redrawn this often (or at once when the verdict changes)
