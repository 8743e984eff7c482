"""Every step of a process, one by one, for a timeline (`tuimon trace`): what a recording keeps
of each step beside the cycle's summaries."""

from __future__ import annotations

from dataclasses import field

from .record import record


@record
class TimelineStep:
    index: int
    t0: int  # CLOCK_MONOTONIC ns, as the probe's records
    t1: int
    phases: dict[str, int] = field(default_factory=dict)  # exclusive ns on the loop thread: they add up to t1 - t0
    values: dict[str, float] = field(default_factory=dict)  # what the probe measured of it: sync.count, comm.bytes, gpu.step_ns, ...


@record
class ProcessSteps:
    """The steps a process completed since the previous cycle."""

    pid: int
    rank: int | None = None
    steps: list[TimelineStep] = field(default_factory=list)  # oldest first
    skipped: int = 0  # completed since the previous cycle but not here (more than the monitor kept)
