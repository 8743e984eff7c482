"""The Textual app. make_app() is shared by the CLI, the tests and the screenshot script."""

from __future__ import annotations

import asyncio
import gc
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from types import FrameType
from typing import TYPE_CHECKING

from textual import work
from textual.app import App, ScreenStackError
from textual.binding import Binding
from textual.css.query import NoMatches

from ..capture.client import MEMORY_STEPS, CaptureRefused
from ..channel import ChannelError
from ..channel.control import MAX_STEPS
from ..model import Cycle
from ..monitor.session import EarlyStart, Session
from ..monitor.state import MonitorState, View
from . import screens
from .panels.capture import Refusal
from .panels.probe import CONFIRM_S, LOADED_SHOWN_S, ProbeLoad, loading_words, probe_result
from .screens.base import ViewScreen

if TYPE_CHECKING:
    from textual.await_complete import AwaitComplete
    from textual.driver import Driver
    from textual.screen import Screen

    from ..inject import Outcome


class TuimonApp(App):
    CSS_PATH = "tuimon.tcss"
    TITLE = "tuimon"
    ENABLE_COMMAND_PALETTE = False  # every action has its own key (?)
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),  # as in top and nvitop
        Binding("p", "pause", "pause"),
        Binding("e", "explain", "why"),
        Binding("r", "ranges", "ranges"),
        Binding("g", "gpu", "GPU detail"),
        Binding("c", "capture", "capture"),
        Binding("plus,equals_sign", "more_steps", "+steps", show=False),
        Binding("minus", "fewer_steps", "-steps", show=False),
        Binding("l", "captures", "captures"),
        Binding("n", "next_rank", "next rank"),
        Binding("t", "stacks", "threads", show=False),  # (the stalled verdict points to it; ? lists it)
        Binding("h", "hot_lines", "hot lines", show=False),
        Binding("m", "memory", "memory", show=False),
        Binding("M", "memory_capture", "memory capture", show=False),
        Binding("question_mark", "help", "help"),
        Binding("i", "load_probe", "load probe"),  # (only while offered: a live process without a channel)
        Binding("y", "confirm_probe", "yes", show=False),
    ]

    def __init__(self, session: Session | None, label: str, state: MonitorState | None = None, ansi_color: bool = True,
                 top: bool = False, quit_stops_job: bool = False, on_view: Callable[[View], None] | None = None,
                 early: EarlyStart | None = None) -> None:
        """top: all GPUs and their processes, no training process; quit_stops_job: `tuimon demo`;
        on_view: also given each cycle's view (the one drawn; drawn or not while paused), from the
        UI thread: the metrics exporter; early: the session, already started (its cycles kept)."""
        # The terminal's own palette and background: fits the user's theme, and shorter escape
        # sequences (fewer bytes per second over SSH).
        super().__init__(ansi_color=ansi_color)
        self.session = session
        self.base_label = self.label = label
        self.top, self.quit_stops_job = top, quit_stops_job
        self.state = state or MonitorState()
        self.paused = False
        self.capture_steps = 10
        self.capture_refused: Refusal | None = None  # (shown on the capture line)
        self.on_view = on_view
        self.early = early
        self.probe: ProbeLoad | None = None  # the `i` line: None where it is not offered
        self._stop_loading = threading.Event()  # (set as the app ends: the load's wait ends then)

    def get_driver_class(self) -> type[Driver]:
        """Textual's driver, but on Linux one that sends the terminal only the cells that changed
        (ui/driver.py); TEXTUAL_DRIVER still picks another."""
        from textual import constants

        if constants.DRIVER is None and sys.platform.startswith("linux"):
            from .driver import DiffingLinuxDriver

            return DiffingLinuxDriver
        return super().get_driver_class()

    def get_default_screen(self) -> Screen:
        """The first screen (Textual's public hook): tuimon's own, not Textual's blank one with ours
        pushed over it (that blank screen was composed, styled, laid out and painted first: ~7% of the
        calls in the start's event loop, cProfile on the dev machine). Called as the app composes, before on_mount: the session is taken over
        (or started) here, so that the screen's first paint already holds what was polled."""
        self._start_session()
        return screens.TopScreen() if self.top else screens.MainScreen()

    def _start_session(self) -> None:
        on_end = lambda: self.call_from_thread(self.redraw)  # noqa: E731
        if self.early is not None:  # started before the UI loaded: what it polled meanwhile is drawn first
            for cycle in self.early.take_over(self._cycle_from_thread, on_end):
                self.apply_cycle(cycle)  # (the screen is not mounted yet: it draws them as it mounts)
        elif self.session is not None:
            self.session.start(self._cycle_from_thread, on_end=on_end)

    def on_mount(self) -> None:
        self._previous_sighup = None
        self._hangup_loop = asyncio.get_running_loop()  # (not Textual's own _loop, which it sets to None at exit)
        try:  # SSH dropped: the terminal is gone, so exit instead of spinning
            self._previous_sighup = signal.signal(signal.SIGHUP, self._hangup)
        except (ValueError, OSError):  # not the main thread
            pass
        if not self.is_headless and _tty_fd() is not None and TERMINAL_CHECK:
            self.set_interval(TERMINAL_CHECK_S, self._exit_if_terminal_gone)
        # (no redraw here: the screen drew itself as it mounted, so its first paint has the numbers)
        self.call_after_refresh(_gc_on_again)

    def _hangup(self, signum: int, frame: FrameType | None) -> None:
        # The kernel follows a hangup's SIGHUP with SIGCONT, on which Textual resumes application
        # mode - a second output thread on the dead terminal, and a shutdown that can hang for
        # good. Drop that first, then exit (tests/test_tmux.py: test_a_closed_terminal_ends_tuimon).
        signal.signal(signal.SIGCONT, signal.SIG_DFL)
        try:
            self._hangup_loop.call_soon_threadsafe(self.exit)
        except RuntimeError:  # the loop has already closed: nothing left to stop
            pass

    def _exit_if_terminal_gone(self) -> None:
        """A terminal can go without a SIGHUP reaching tuimon (SIGHUP ignored, or a pty that was
        never its controlling terminal): Textual's input thread then reads end-of-file in a loop,
        half a core for good. Its hangup shows in poll() as POLLHUP: exit then, as on SIGHUP."""
        fd = _tty_fd()
        if fd is None or _hung_up(fd):
            self.exit()

    def on_unmount(self) -> None:
        self._stop_loading.set()
        if self._previous_sighup is not None:
            try:
                signal.signal(signal.SIGHUP, self._previous_sighup)
            except (ValueError, OSError):
                pass
        if self.session is not None:
            self.session.stop()

    def _cycle_from_thread(self, cycle: Cycle) -> None:
        try:
            self.call_from_thread(self.apply_cycle, cycle)
        except RuntimeError:
            pass  # the app is shutting down

    def apply_cycle(self, cycle: Cycle) -> None:
        self.state.apply(cycle)
        view = self.state.view() if self.on_view is not None or not self.paused else None
        if self.on_view is not None and view is not None:
            self.on_view(view)
        if not self.paused:
            self.redraw(view)

    def redraw(self, view: View | None = None, mounting: bool = False) -> None:
        """view: this cycle's, already made (default: made here); mounting: from the screen's
        on_mount, so its first paint already holds the numbers (one frame, not empty panels first)."""
        progress = self.session.progress() if self.session is not None else None
        if progress is not None:  # a replay: where it is
            self.label = f"{self.base_label} · {progress}"
        try:
            screen = self.screen
        except ScreenStackError:  # shutting down: the last screen is gone
            return
        if not isinstance(screen, ViewScreen) or not (screen.is_mounted or mounting):
            return
        view = view if view is not None else self.state.view(self.paused)
        self._follow_probe(view)
        try:
            with self.batch_update():
                screen.show_view(view, self.label)
        except NoMatches:
            return  # the screen is still composing; the next update draws it

    TRAINING_ACTIONS = {"ranges", "explain", "capture", "more_steps", "fewer_steps", "captures", "next_rank", "stacks", "hot_lines",
                        "memory", "memory_capture"}

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """In `top` there is no training process: its keys are off (and out of the footer); `n`
        only where the job has ranks to switch between; `i` only while the probe is offered, `y`
        while it asks to confirm."""
        if action == "load_probe":
            return self.probe is not None and self.probe.state in ("offered", "confirm", "failed")
        if action == "confirm_probe":
            return self.probe is not None and self.probe.state == "confirm"
        if action == "next_rank":
            return not self.top and self.session is not None and self.session.ranks_switchable and \
                len(self.state.ranks) > 1
        return not (self.top and action in self.TRAINING_ACTIONS)

    # -- `i`: the probe loaded into a process attached without it ------------------------------------

    def _follow_probe(self, view: View) -> None:
        """The `i` line for this view: offered while a live process attached without the probe is
        alive and has no channel (not in a replay, not in `top`); a load in flight, or just done,
        stays until it is seen through."""
        p, now, process = self.probe, time.monotonic(), view.process
        offer = (not self.top and self.session is not None and self.session.progress() is None
                 and view.training is None and view.outside is not None and process is not None and process.alive)
        new: ProbeLoad | None
        if p is not None and (p.state == "loading" or (p.state == "loaded" and now < p.until)):
            new = p
        elif not offer or process is None:
            new = None
        elif p is None or p.pid != process.pid or p.state == "loaded" or (p.state == "confirm" and now >= p.until):
            new = ProbeLoad("offered", process.pid)
        else:  # offered, a confirmation in time, a refusal or a load queued in the job: as it is
            new = p
        self._set_probe(new)

    def _set_probe(self, new: ProbeLoad | None) -> None:
        old, self.probe = self.probe, new
        if (old.state if old else None) != (new.state if new else None):
            self.refresh_bindings()  # (`i` and `y` in the footer, or not)

    def action_load_probe(self) -> None:
        """A first `i` asks to confirm (what it does and costs on the line); a second, or `y`, loads it."""
        p = self.probe
        if p is None or p.state not in ("offered", "confirm", "failed"):
            return
        if p.state == "confirm" and time.monotonic() < p.until:
            self.action_confirm_probe()
            return
        self._set_probe(replace(p, state="confirm", words="", until=time.monotonic() + CONFIRM_S))
        self.set_timer(CONFIRM_S + 0.05, self.redraw)  # (unconfirmed: offered again)
        self.redraw()

    def action_confirm_probe(self) -> None:
        p = self.probe
        if p is None or p.state != "confirm":
            return
        self._set_probe(ProbeLoad("loading", p.pid, loading_words([p.pid])))
        self.redraw()
        self._load_probe(p.pid)

    @work(thread=True, exclusive=True, group="probe", exit_on_error=False)
    def _load_probe(self, pid: int) -> None:
        """(a thread: ptrace, then a wait of up to 15 s for the job's main thread) Load the probe into
        pid's training processes, its ranks when it is a launcher; what happened goes to the line."""
        from ..inject import Outcome, load_each
        from ..inject.ranks import training_processes

        try:
            targets = training_processes(pid)
            if targets != [pid]:
                self._from_thread(self._probe_loading, pid, loading_words(targets))
            outcomes = list(load_each(targets, cancel=self._stop_loading))
        except Exception as e:  # noqa: BLE001 - a bug here is said on the line, never a traceback
            outcomes = [Outcome(pid, why=f"{type(e).__name__}: {e}")]
        self._from_thread(self._probe_loaded, pid, outcomes)

    def _from_thread(self, fn: Callable[..., object], *args: object) -> None:
        try:
            self.call_from_thread(fn, *args)
        except RuntimeError:
            pass  # the app is shutting down

    def _probe_loading(self, pid: int, words: str) -> None:
        if self.probe is not None and self.probe.state == "loading":
            self._set_probe(ProbeLoad("loading", pid, words))
            self.redraw()

    def _probe_loaded(self, pid: int, outcomes: list[Outcome]) -> None:
        done = probe_result(pid, outcomes)
        self._set_probe(replace(done, until=time.monotonic() + LOADED_SHOWN_S) if done.state == "loaded" else done)
        self.redraw()

    def action_next_rank(self) -> None:
        if self.session is None:
            return
        try:
            self.notify(self.session.next_rank(), title="ranks", timeout=2)
        except CaptureRefused as e:
            self.notify(str(e), title="ranks", severity="warning", timeout=3)

    @property
    def live(self) -> bool:
        """A running process behind the screen, whose probe can be asked (not a replay, nor a
        recording's frames drawn without a session)."""
        return self.session is not None and self.session.live

    @property
    def replaying(self) -> bool:
        """A replay session: its header keeps its [replay · ...] tag at any width."""
        return self.session is not None and not self.session.live

    def action_stacks(self) -> None:
        """Every thread's stack: asked of the probe now (answered within a second), shown on their
        screen; a replay shows the ones it recorded."""
        if self.session is not None and self.live:
            try:
                self.session.request_stacks()
            except (CaptureRefused, ChannelError, OSError) as e:
                self.notify(str(e), title="threads", severity="warning", timeout=4)
        if not isinstance(self.screen, screens.StacksScreen):
            self.push_screen(screens.StacksScreen())
        self.call_after_refresh(self.redraw)

    def action_hot_lines(self) -> None:
        self.push_screen(screens.HotLinesScreen())
        self.call_after_refresh(self.redraw)

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.redraw()

    def action_ranges(self) -> None:
        self.push_screen(screens.RangesScreen())
        self.call_after_refresh(self.redraw)

    def action_explain(self) -> None:
        self.push_screen(screens.ExplainScreen())
        self.call_after_refresh(self.redraw)

    def action_gpu(self) -> None:
        self.push_screen(screens.GpuScreen())
        self.call_after_refresh(self.redraw)

    def action_help(self) -> None:
        self.push_screen(screens.HelpScreen(self.quit_stops_job, self.top))

    def action_capture(self) -> None:
        if self.top:
            return
        if self.session is None:
            self.notify("nothing to capture here", title="capture", severity="warning")
            return
        steps = self.state.training.steps if self.state.training else 0
        try:  # (the capture panel follows it from here, brought into view: no toast over it)
            self.session.request_capture(self.capture_steps if steps else None, None if steps else 10.0)
            self.capture_refused = None
        except (CaptureRefused, ChannelError) as e:
            c = self.state.capture
            self.capture_refused = Refusal(str(e), c.seq, c.state) if c is not None else None
            self.notify(str(e), title="capture refused", severity="warning", timeout=5)
        self.redraw()
        if isinstance(self.screen, screens.MainScreen):
            self.call_after_refresh(self.screen.reveal_capture)

    def action_memory(self) -> None:
        self.push_screen(screens.MemoryScreen())
        self.call_after_refresh(self.redraw)

    def action_memory_capture(self) -> None:
        """The allocator's history for MEMORY_STEPS steps (10 s without steps)."""
        if self.top or self.session is None:
            self.notify("nothing to capture here", title="memory capture", severity="warning")
            return
        steps = self.state.training.steps if self.state.training else 0
        try:
            said = self.session.request_capture(MEMORY_STEPS if steps else None, None if steps else 10.0, memory=True)
            self.notify(said + " (m shows it)", title="memory capture", timeout=3)
        except (CaptureRefused, ChannelError) as e:
            self.notify(str(e), title="memory capture refused", severity="warning", timeout=5)

    def _set_steps(self, n: int) -> None:
        self.capture_steps = max(1, min(MAX_STEPS, n))
        self.redraw()

    def action_more_steps(self) -> None:
        self._set_steps(self.capture_steps + (10 if self.capture_steps >= 10 else 1))

    def action_fewer_steps(self) -> None:
        self._set_steps(self.capture_steps - (10 if self.capture_steps > 10 else 1))

    def action_captures(self) -> None:
        self.push_screen(screens.CapturesScreen())
        self.call_after_refresh(self.redraw)

    def pop_screen(self) -> AwaitComplete:
        result = super().pop_screen()
        self.call_after_refresh(self.redraw)
        return result


TERMINAL_CHECK_S = 1.0  # how often the terminal is checked for a hangup that sent no signal
# (Linux's poll() reports a pty's hangup; macOS's does not support devices and would say POLLNVAL)
TERMINAL_CHECK = sys.platform.startswith("linux") and hasattr(select, "poll")


def _gc_on_again() -> None:
    """The cyclic GC on again after the first paint, where cli.tui turned it off for the start. What
    the start made meanwhile (Textual's modules, the screen) lives as long as the app: frozen, so no
    pass walks it again (on the dev machine one pass ~30 s in walked it: 17-26 ms)."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def _tty_fd() -> int | None:
    """The terminal tuimon reads its keys from (Textual's input: stdin), None when it is not one."""
    try:
        fd = sys.__stdin__.fileno() if sys.__stdin__ is not None else -1
        return fd if fd >= 0 and os.isatty(fd) else None
    except (OSError, ValueError):
        return None


def _hung_up(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    try:
        return any(ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, ev in poller.poll(0))
    except OSError:
        return True


def make_app(session: Session | None, label: str, state: MonitorState | None = None, top: bool = False,
             quit_stops_job: bool = False, on_view: Callable[[View], None] | None = None,
             early: EarlyStart | None = None) -> TuimonApp:
    return TuimonApp(session, label, state, top=top, quit_stops_job=quit_stops_job, on_view=on_view, early=early)
