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
class PhaseRow:
    """A phase of the step on the loop thread: data, forward, backward, optimizer, sync or other."""

    name: str
    share: float  # of the window's step time (the phases of a step add up to it)
    mean_ms: float  # per step


@dataclass(frozen=True)
class GpuTimes:
    """The GPU side of the steps, from CUDA events (see tuimon/probe/gpu_timing.py)."""

    steps: int  # steps measured in the window (short steps are sampled)
    step_ms: float | None = None  # median GPU time between a step's boundary events
    busy_share: float | None = None  # at least this share of step time the GPU had work queued
    idle_share: float | None = None  # at most this share it had none (1 - busy_share)
    lag_ms: float | None = None  # median queued GPU work when the host finished a step (0: the GPU waited)


@dataclass(frozen=True)
class SyncSite:
    site: str  # file:line of the code that synced (the first frame outside torch and tuimon)
    per_step: float  # estimated from sampled call sites


@dataclass(frozen=True)
class Syncs:
    """Device-to-host syncs of the loop thread (.item(), .cpu(), torch.cuda.synchronize(), ...)."""

    per_step: float
    share: float  # of step time, blocked in them
    mean_us: float  # one sync's wait
    top: list[SyncSite] = field(default_factory=list)


@dataclass(frozen=True)
class Memory:
    """The caching allocator's numbers for the loop's GPU (bytes), read every ~0.5 s."""

    allocated: int | None = None
    reserved: int | None = None
    peak_allocated: int | None = None
    alloc_retries: int | None = None  # cudaMalloc retries after freeing the cache: memory pressure
    ooms: int | None = None


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
    phases: list[PhaseRow] = field(default_factory=list)  # the step's anatomy (empty: a probe without it)
    gpu: GpuTimes | None = None
    syncs: Syncs | None = None
    memory: Memory | None = None
    dataloader_workers: int | None = None
    loop_tid: int | None = None  # the OS thread that steps
