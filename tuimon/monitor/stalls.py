"""A stalled loop's thread stacks, asked of its probe: at the first cycle the loop shows stalled
(analysis/stall.py says when), then every STACKS_EVERY_S while it stays so. The probe answers on
its own thread (~0.2 s), so the stacks come with a later cycle; nothing is asked on the hot path."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..analysis import stall as loop_stall
from ..channel import ChannelError
from ..model import ProcessSample, TrainingSnapshot
from .training import TrainingView

STACKS_EVERY_S = 10.0  # while the loop is stalled, its threads' stacks are asked for this often


class StallWatch:
    def __init__(self, every_s: float = STACKS_EVERY_S, clock: Callable[[], float] = time.monotonic):
        self.every_s, self._clock = every_s, clock
        self._asked_at: float | None = None  # when the stalled loop's stacks were last asked for

    def check(self, view: TrainingView, training: TrainingSnapshot, process: ProcessSample | None) -> bool:
        """Ask the shown process's probe for its stacks if its loop is stalled and they were not
        asked for in the last every_s; whether they were asked now. process: the job's processes
        (its loop thread's CPU tells a blocked loop from a busy one before the first step)."""
        check = loop_stall.check(training, process)
        now = self._clock()
        if check is None or not check.stalled or (self._asked_at is not None and now - self._asked_at < self.every_s):
            return False
        self._asked_at = now
        try:
            view.request_stacks()
        except (ChannelError, OSError):
            return False  # (its segment went away: the next poll says so)
        return True
