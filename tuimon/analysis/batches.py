"""A job's steps as batches, what a baseline comparison is made of: consecutive steps past the job's
warm-up, cut into batches of at least REGRESSION_BATCH_S (a longer step is a batch of its own). A
batch's mean is its time over its steps; a window's mean is its time over its steps (1 / steps per
second: what the job pays per step, bursts and slow tails included).

Fed one snapshot per monitor cycle. The steps that ended between two snapshots are counted exactly
(the probe's step counter), and so is their time: their durations where the snapshot still holds
them all, else the time between the ends of the newest steps then and now (steps run end to end).
So a loop of 1 ms steps is measured as exactly as one of 10 s steps. A first snapshot brings the
steps it still holds (its last 120), so a monitor attached to a running job has a history at once.

The warm-up (the job's first REGRESSION_WARMUP_STEPS steps, and any step that began in its first
REGRESSION_WARMUP_S seconds) is left out. Pure: snapshots in, batches out."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..model import TrainingSnapshot
from ..model.record import record
from . import thresholds as T

SAMPLES_PER_BATCH = 240  # step times kept per batch (for the window's percentiles): every one of slower steps


@record(kw_only=False)
class Batch:
    steps: int
    ms: float  # their time, end to end
    samples: tuple[float, ...] = ()  # step times seen among them (all of them, or the last of each cycle)

    @property
    def mean_ms(self) -> float:
        return self.ms / self.steps


@dataclass
class _Open:
    steps: int = 0
    ms: float = 0.0
    samples: list[float] = field(default_factory=list)


class StepBatches:
    def __init__(self, keep: int):
        """keep: how many batches to keep, the newest."""
        self.batches: deque[Batch] = deque(maxlen=keep)
        self._reset(None)

    def _reset(self, pid: int | None) -> None:
        self.batches.clear()
        self.pid = pid
        self.open = _Open()
        self.steps: int | None = None  # the job's steps at the last snapshot
        self.end_s: float | None = None  # when its newest step then ended (the job's uptime, s)
        self.counted = 0  # steps past the warm-up, batched or in the open batch
        self.counted_ms = 0.0  # ...and their time
        self.added: list[float] = []  # the step times the last add() took (all, or the last of many)

    @property
    def in_warmup(self) -> bool:
        return self.counted == 0

    def add(self, t: TrainingSnapshot | None) -> None:
        self.added = []
        if t is None:
            return
        if t.pid != self.pid or (self.steps is not None and t.steps < self.steps):
            self._reset(t.pid)  # another process shown (another rank), or a counter that restarted
        end = t.uptime_s - t.since_step_s if t.since_step_s is not None else t.uptime_s
        recent = t.recent_step_ms
        last = self.steps  # the last step counted (None: none yet)
        new = len(recent) if last is None else t.steps - last
        if new > 0:
            if last is None or new <= len(recent):  # each step, with its own time
                times = recent[-new:]
                ends, at = [], end
                for ms in reversed(times):
                    ends.append(at)
                    at -= ms / 1e3
                for k, (ms, step_end) in enumerate(zip(times, reversed(ends), strict=True)):
                    self._take(t.steps - len(times) + k + 1, 1, ms, step_end - ms / 1e3, (ms,))
            elif self.end_s is not None and t.since_step_s is not None:  # more steps than the snapshot holds
                self._take(last + 1, new, (end - self.end_s) * 1e3, self.end_s, tuple(recent))
            elif recent:  # (recordings without since_step_s: the steps it holds stand for the others)
                self._take(last + 1, new, sum(recent) / len(recent) * new, end - sum(recent) / 1e3, tuple(recent))
        if last is None or new > 0:
            self.steps, self.end_s = t.steps, end

    def _take(self, first_step: int, steps: int, ms: float, start_s: float, samples: tuple[float, ...]) -> None:
        """Steps first_step.. (steps of them, ms in all, the first beginning at start_s of the job's
        uptime) into the open batch, unless they are the job's warm-up."""
        if first_step <= T.REGRESSION_WARMUP_STEPS.value or start_s < T.REGRESSION_WARMUP_S.value or ms <= 0:
            return
        o = self.open
        o.steps += steps
        o.ms += ms
        o.samples.extend(samples[-SAMPLES_PER_BATCH:])
        self.added.extend(samples)
        self.counted += steps
        self.counted_ms += ms
        if o.ms >= T.REGRESSION_BATCH_S.value * 1e3:
            self.batches.append(Batch(o.steps, round(o.ms, 3), tuple(o.samples[-SAMPLES_PER_BATCH:])))
            self.open = _Open()

    def window(self, n: int) -> list[Batch]:
        """The newest n batches (fewer while fewer were made)."""
        return list(self.batches)[-n:]


def batched(step_ms: list[float]) -> list[Batch]:
    """Consecutive step times cut into batches (for baselines that kept only their step times)."""
    out, o = [], _Open()
    for ms in step_ms:
        o.steps, o.ms = o.steps + 1, o.ms + ms
        if o.ms >= T.REGRESSION_BATCH_S.value * 1e3:
            out.append(Batch(o.steps, o.ms))
            o = _Open()
    return out
