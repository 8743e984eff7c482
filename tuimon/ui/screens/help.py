"""The keys, and what the screens show."""

from __future__ import annotations

import textwrap

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Static

from ..format import verdict_names


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "app.pop_screen", "close")]

    def __init__(self, quit_stops_job: bool = False, top: bool = False):
        super().__init__()
        self.quit_stops_job, self.top = quit_stops_job, top

    TRAINING = """tuimon keys

  e    the verdict explained: every rule, its numbers and thresholds
  r    ranges: every range with count, mean, p95 and share (s: sort)
  g    GPU detail: longer histories (n: next GPU)
  n    next rank: the job's ranks in turn
  p    pause / resume the display (sampling goes on)
  c    capture: N steps (+/- change N) or 10 s (l: the captures so far)
  m    GPU memory: the allocator over time (M: a memory_viz capture)
  h    hot lines: where the loop thread's time goes, line by line
  t    threads: every thread's stack (read by itself when it stalls)
  i    a job started without tuimon: load its probe (y confirms)
  ?    this help
  q    {quit}  (also Ctrl-C)

{verdicts}"""
    VERDICTS = ("The verdict (e explains it): {names}; each with its numbers and a next step. "
                '"now": the step in progress. "coarse": no GPM (kernel-busy time only).')

    TOP = """tuimon top keys

  g    GPU detail: longer histories (n: next GPU)
  p    pause / resume the display (sampling goes on)
  ?    this help
  q    quit  (also Ctrl-C)

Every GPU with its processes (PID, user, GPU memory, SM share, command)
and the host's CPU and memory. For one training job's steps, phases and
verdict: tuimon attach PID, or tuimon run -- COMMAND. "coarse" marks GPUs
without GPM, where only kernel-busy time is known."""

    def compose(self) -> ComposeResult:
        quit = "quit and stop the demo job" if self.quit_stops_job else "quit (the training process goes on)"
        verdicts = textwrap.fill(self.VERDICTS.format(names=verdict_names()), 72, break_on_hyphens=False)
        yield Static(Text(self.TOP if self.top else self.TRAINING.format(quit=quit, verdicts=verdicts)), id="help")
