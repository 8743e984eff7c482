"""What tuimon sees of a process without the probe from outside it: its main thread's hot lines,
sampled with py-spy (sources/pyspy.py). No steps and no phases: those need the probe."""

from __future__ import annotations

from dataclasses import field

from .record import record
from .training import HotLine

OUTSIDE_PHASE = "outside"  # the phase of every line sampled from outside: no phases without the probe


@record
class OutsideLines:
    """The main thread's lines over the last rounds of sampling, or why there are none."""

    pid: int
    state: str  # 'sampling' (lines below) | 'starting' (no round finished yet) | 'failed' (why) | 'ended'
    why: str = ""  # failed: what stops py-spy and what grants it; ended: the process is gone
    tool: str = "py-spy"  # with its version where it said it: 'py-spy 0.4.2'
    rate_hz: float = 0.0
    seconds: float = 0.0  # the span of time the lines cover
    samples: int = 0  # the main thread's samples the lines come from
    threads: int = 0  # Python threads seen
    thread: str | None = None  # the main thread's name
    errors: int = 0  # samples py-spy could not read (a stack that changed under it: --nonblocking)
    hot_lines: list[HotLine] = field(default_factory=list)  # the largest first, phase OUTSIDE_PHASE
