"""Monitor state: the latest samples and their histories, fed one Cycle at a time by apply(),
from live sessions and replays alike. view() returns a frozen copy for drawing (histories copied),
so the UI never reads a list the sampler is appending to."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..analysis.verdict import Verdict, verdict
from ..model import NA, CaptureStatus, Cycle, GpuSample, ProcessSample, TrainingSnapshot, num

GPU_SERIES = ("sm_active", "tensor_active", "dram_bw", "power_w", "util_gpu", "util_mem", "mem_used")


@dataclass(frozen=True)
class GpuView:
    latest: GpuSample
    history: dict[str, list]  # field -> values (None where unavailable), oldest first


@dataclass(frozen=True)
class View:
    training: TrainingSnapshot | None
    process: ProcessSample | None
    gpus: list[GpuView]
    step_ms: list[float]
    verdict: Verdict
    target_gpus: list[int]
    gpu_note: str | None = None
    paused: bool = False
    capture: CaptureStatus | None = None
    captures: list[CaptureStatus] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)  # source -> reason, as of the last cycle
    channel: str | NA | None = None  # the segment read, or why there is none
    shown_why: str | None = None  # why the process shown is not the one asked for


class MonitorState:
    def __init__(self, history: int = 600):
        self.history = history
        self.training: TrainingSnapshot | None = None
        self.process: ProcessSample | None = None
        self.gpus: dict[int, GpuSample] = {}
        self._gpu_hist: dict[int, dict[str, deque]] = {}
        self._step_ms: deque = deque(maxlen=history)
        self._last_step = 0
        self.gpu_note: str | None = None
        self.capture: CaptureStatus | None = None
        self.captures: dict[int, CaptureStatus] = {}  # request seq -> last state seen (this session)
        self.problems: dict[str, str] = {}
        self.channel: str | NA | None = None
        self.shown_why: str | None = None
        self.cycles = 0

    def apply(self, c: Cycle) -> None:
        self.cycles += 1
        if c.gpus is not None:
            for s in c.gpus:
                self.gpus[s.index] = s
                hist = self._gpu_hist.setdefault(s.index, {f: deque(maxlen=self.history) for f in GPU_SERIES})
                for f in GPU_SERIES:
                    hist[f].append(num(getattr(s, f)))
        if c.process is not None:
            self.process = c.process
        if c.training is not None:
            self._add_steps(c.training)
            self.training = c.training
        if c.capture is not None:
            self.capture = c.capture
            if c.capture.seq:
                self.captures[c.capture.seq] = c.capture
        if c.channel is not None:
            self.channel, self.shown_why = c.channel, c.shown_why
        self.gpu_note = c.gpu_note
        self.problems = dict(c.problems)  # a source that recovered clears its problem

    def _add_steps(self, snap: TrainingSnapshot) -> None:
        new = snap.steps - self._last_step
        if new > 0:
            if snap.recent_step_ms:
                self._step_ms.extend(snap.recent_step_ms[-min(new, len(snap.recent_step_ms)):])
            elif snap.step_time_ms is not None:
                self._step_ms.append(snap.step_time_ms.last)  # recordings made before recent_step_ms
        self._last_step = snap.steps

    def target_gpus(self) -> list[int]:
        return sorted(i for i, s in self.gpus.items() if s.uses_target)

    def view(self, paused: bool = False) -> View:
        gpus = [GpuView(self.gpus[i], {f: list(v) for f, v in self._gpu_hist[i].items()}) for i in sorted(self.gpus)]
        return View(self.training, self.process, gpus, list(self._step_ms), self._verdict(),
                    self.target_gpus(), self.gpu_note, paused, self.capture,
                    [self.captures[k] for k in sorted(self.captures)], dict(self.problems), self.channel,
                    self.shown_why)

    def _verdict(self) -> Verdict:
        t = self.training
        used = self.target_gpus() or sorted(self.gpus)
        busy, coarse = [], False
        for i in used:
            s = self.gpus[i]
            v = num(s.sm_active)
            if v is None and num(s.util_gpu) is not None:
                v, coarse = num(s.util_gpu), True
            if v is not None:
                busy.append(v)
        return verdict(t.window_steps if t else 0, t.data_wait_share if t else None,
                       sum(busy) / len(busy) if busy else None, coarse)
