"""A plain-text live view: one line per interval, fit for a log or a dumb terminal; a source that
fails or recovers is said once, on a line of its own."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from ..channel.text import safe_text
from ..model import NA
from ..monitor.session import LiveSession, run_cycles
from ..monitor.state import MonitorState, View

if TYPE_CHECKING:
    from ..model import Baseline, Cycle

CHANNEL_WAIT_S = 10.0  # a job tuimon started has this long to start the probe before it is said


def _why_none(reason: str) -> str:
    """Why a job tuimon started has no channel (its advice, start it with tuimon run, is moot)."""
    if "has no tuimon channel" in reason:
        return ("the probe starts with the job's Python processes: a command that runs no Python (or "
                "has not started it yet) has none; its processes and GPUs are still shown")
    return safe_text(reason, 300)


class ProblemLines:
    """Says each source's failure once when it starts, and once when it clears."""

    def __init__(self, out: TextIO = sys.stderr) -> None:
        self.out = out
        self.known: dict[str, str] = {}  # source -> its failure, as last said

    def update(self, view: View) -> None:
        for source, why in view.problems.items():
            if self.known.get(source) != why:
                print(f"tuimon: {source}: {safe_text(why, 500)}", file=self.out, flush=True)
        for source in set(self.known) - set(view.problems):
            print(f"tuimon: {source}: recovered", file=self.out, flush=True)
        self.known = dict(view.problems)


def follow(session: LiveSession, interval: float, until: Callable[[], bool] | None = None, out: TextIO = sys.stdout,
           baseline: tuple[str, Baseline] | None = None, launched: bool = False,
           on_view: Callable[[View], object] | None = None) -> View:
    """Print a line each interval until until() is true or the process is gone; returns the last
    view (the last look at a process that ended). baseline: (file, Baseline) to compare against;
    launched: a job tuimon just started, whose channel comes once its Python starts the probe;
    on_view: also given each view (the metrics exporter's publish)."""
    from ..ui.plain import summary_line  # (formatting only: textual is not started)

    state, problems = MonitorState(baseline=baseline), ProblemLines()
    said_channel = [False]
    stacks_said: list[str | None] = [None]
    started = time.monotonic()

    def on_cycle(c: Cycle) -> None:
        state.apply(c)
        view = state.view()
        if on_view is not None:
            on_view(view)
        problems.update(view)
        stacks = view.training.stacks if view.training is not None and view.stall and view.stall.stalled else None
        if stacks and stacks != stacks_said[0]:  # a stall: where every thread is, once per dump that changed
            stacks_said[0] = stacks
            print("\n".join(safe_text(line, 300) for line in stacks.splitlines()), file=out, flush=True)
        pending = launched and time.monotonic() - started < CHANNEL_WAIT_S
        if isinstance(view.channel, NA) and not said_channel[0] and not pending:
            why = _why_none(view.channel.reason) if launched else safe_text(view.channel.reason, 300)
            after = f" from the job after {CHANNEL_WAIT_S:g} s" if launched else ""
            print(f"tuimon: no channel{after}: {why}", file=sys.stderr, flush=True)
            said_channel[0] = True
        print(summary_line(view, channel_pending=pending), file=out, flush=True)

    ended_after_poll = [False]

    def done(c: Cycle) -> bool:
        gone = c.process is not None and not c.process.alive
        if gone:
            return True
        if until is not None and until():
            ended_after_poll[0] = c.process is not None  # its last line read it alive
            return True
        return False

    try:
        run_cycles(session, interval, on_cycle, done)
        if ended_after_poll[0]:  # the job ended between this cycle's poll and until(): a last look at it
            on_cycle(session.poll())
    finally:
        session.stop()
    return state.view()
