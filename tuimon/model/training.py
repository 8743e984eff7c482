"""What a training process says about itself through its channel, summarised over a window of
recent steps."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StepTimes:
    p50: float
    p95: float
    p99: float
    mean: float
    last: float


@dataclass(frozen=True)
class RangeRow:
    name: str
    count: int
    mean_ms: float
    p95_ms: float
    share: float | None  # of the window's step time (nested ranges overlap their parents)
    depth: int


@dataclass(frozen=True)
class TrainingSnapshot:
    pid: int
    state: str = "alive"  # 'alive' | 'exited' | 'reused'
    closed: bool = False  # the process exited cleanly
    argv: list[str] = field(default_factory=list)
    rank: int | None = None
    world_size: int | None = None
    capture_kind: str | None = None  # what `c` takes: 'nsys' or 'torch.profiler'
    probe_hot_path: str | None = None  # 'c', or 'python' where the C extension is missing
    uptime_s: float = 0.0  # until the process exited, when it did
    steps: int = 0
    window_steps: int = 0  # steps the statistics below cover
    step_time_ms: StepTimes | None = None
    steps_per_s: float | None = None
    data_wait_share: float | None = None
    breakdown: dict[str, float] | None = None  # data wait, top-level ranges, the unaccounted rest
    ranges: list[RangeRow] = field(default_factory=list)
    throughput_per_s: dict[str, float] = field(default_factory=dict)
    recent_step_ms: list[float] = field(default_factory=list)  # the last 120 steps, oldest first
    records: int = 0
    dropped: int = 0  # records overwritten before this monitor read them, counted exactly
    corrupt: int = 0
