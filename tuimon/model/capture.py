"""A capture window's state as the probe reports it, and what the monitor found in its result."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class CaptureSummary:
    state: str  # 'pending' (being read) | 'done' | 'failed' | 'waiting' (nsys has not written it yet)
    file: str | None = None
    size: int | None = None
    lines: list[str] = field(default_factory=list)  # what a person reads: top kernels, operators, ranges
    error: str | None = None  # why it failed
    kernels_per_step: float | None = None  # GPU kernels the window ran, per step (torch.profiler windows)
    kernel_us: float | None = None  # their mean duration


@dataclass(frozen=True)
class CaptureStatus:
    seq: int  # the request this state answers (0: none yet)
    state: str  # idle | armed | capturing | writing | done | failed
    kind: str  # 'nsys' | 'torch.profiler'
    first_step: int = 0
    last_step: int = 0
    message: str = ""
    path: str = ""
    updated_ns: int = 0
    summary: CaptureSummary | None = None

    @property
    def busy(self) -> bool:
        return self.state in ("armed", "capturing", "writing")
