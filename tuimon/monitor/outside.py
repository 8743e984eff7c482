"""A process without the probe, sampled from outside: its main thread's hot lines by py-spy
(sources/pyspy.py), started at the first cycle that shows no channel while the process is alive,
stopped once a channel is shown (the probe samples its own loop) or the session ends."""

from __future__ import annotations

from collections.abc import Callable

from ..model import OutsideLines, ProcessSample
from ..sources.pyspy import FIRST_ROUND_S, OutsideSampler


class OutsideWatch:
    """pid: the process to sample (None: never sample, the session was not asked to); first_round_s:
    its first round's seconds (the screen's by default; `attach --once` asks for its --window);
    on_start(pid): called when the sampler starts (the session then reads the main thread's CPU)."""

    def __init__(self, pid: int | None, first_round_s: int = FIRST_ROUND_S,
                 on_start: Callable[[int], None] | None = None,
                 make: Callable[..., OutsideSampler] = OutsideSampler):
        self.pid, self.first_round_s = pid, first_round_s
        self._on_start, self._make = on_start, make
        self.sampler: OutsideSampler | None = None

    def lines(self, has_channel: bool, process: ProcessSample | None) -> OutsideLines | None:
        """This cycle's lines from outside; None with a channel shown, without a pid, or once the
        process is gone before a sampler started (what its channel left, if anything, is all there is)."""
        if has_channel or not self.pid:
            self.stop()
            return None
        if self.sampler is None:
            if process is None or not process.alive:
                return None
            self.sampler = self._make(self.pid, first_round_s=self.first_round_s).start()
            if self._on_start is not None:
                self._on_start(self.pid)
        return self.sampler.latest()

    def stop(self) -> None:
        sampler, self.sampler = self.sampler, None
        if sampler is not None:
            sampler.stop()
