"""Monitor state: the latest samples and their histories, fed by apply() from live pollers and
from replays alike. view() returns a frozen copy for drawing (histories copied), so the UI never
reads a list a poller is appending to."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from ..analysis.verdict import Verdict, verdict
from ..sources.values import num

GPU_SERIES = ("sm_active", "tensor_active", "dram_bw", "power_w", "util_gpu", "util_mem", "mem_used")


@dataclass(frozen=True)
class GpuView:
    latest: dict
    history: dict[str, list]  # field -> values (None where unavailable), oldest first


@dataclass(frozen=True)
class View:
    training: dict | None
    process: dict | None
    gpus: list[GpuView]
    step_ms: list[float]
    verdict: Verdict
    target_gpus: list[int]
    gpu_note: str | None = None
    paused: bool = False
    capture: dict | None = None
    captures: list[dict] = field(default_factory=list)


class MonitorState:
    def __init__(self, history: int = 600):
        self.history = history
        self.training: dict | None = None
        self.process: dict | None = None
        self.gpus: dict[int, dict] = {}
        self._gpu_hist: dict[int, dict[str, deque]] = {}
        self._step_ms: deque = deque(maxlen=history)
        self._last_step = 0
        self.gpu_note: str | None = None
        self.capture: dict | None = None
        self.captures: dict[int, dict] = {}  # request seq -> last state seen (this session)
        self.version = 0  # bumps on every apply: widgets redraw only when it moved

    def apply(self, source: str, data) -> None:
        if source == "gpu" and isinstance(data, list):
            for s in data:
                i = s.get("index")
                if not isinstance(i, int):
                    continue
                self.gpus[i] = s
                hist = self._gpu_hist.setdefault(i, {f: deque(maxlen=self.history) for f in GPU_SERIES})
                for f in GPU_SERIES:
                    hist[f].append(num(s.get(f)))
        elif source == "process" and isinstance(data, dict):
            self.process = data
        elif source == "training" and isinstance(data, dict):
            self._add_steps(data)
            self.training = data
        elif source == "note":
            self.gpu_note = data
        elif source == "capture" and isinstance(data, dict):
            self.capture = data
            if data.get("ack_seq"):
                self.captures[data["ack_seq"]] = data
        self.version += 1

    def _add_steps(self, snap: dict) -> None:
        steps = snap.get("steps") or 0
        recent = snap.get("recent_step_ms")
        new = steps - self._last_step
        if new > 0:
            if isinstance(recent, list):
                self._step_ms.extend(recent[-min(new, len(recent)):])
            elif (snap.get("step_time_ms") or {}).get("last") is not None:
                self._step_ms.append(snap["step_time_ms"]["last"])  # recordings made before recent_step_ms
        self._last_step = steps

    def target_gpus(self) -> list[int]:
        return sorted(i for i, s in self.gpus.items() if s.get("uses_target"))

    def view(self, paused: bool = False) -> View:
        gpus = [GpuView(dict(self.gpus[i]), {f: list(v) for f, v in self._gpu_hist[i].items()})
                for i in sorted(self.gpus)]
        return View(self.training, self.process, gpus, list(self._step_ms), self._verdict(),
                    self.target_gpus(), self.gpu_note, paused, self.capture,
                    [self.captures[k] for k in sorted(self.captures)])

    def _verdict(self) -> Verdict:
        t = self.training or {}
        used = self.target_gpus() or sorted(self.gpus)
        busy, coarse = [], False
        for i in used:
            s = self.gpus[i]
            v = num(s.get("sm_active"))
            if v is None and num(s.get("util_gpu")) is not None:
                v, coarse = num(s.get("util_gpu")), True
            if v is not None:
                busy.append(v)
        return verdict(t.get("window_steps") or 0, t.get("data_wait_share"),
                       sum(busy) / len(busy) if busy else None, coarse)
