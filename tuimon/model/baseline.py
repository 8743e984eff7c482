"""A baseline (a known-good run of a job, saved to a file) and how the running job compares to it."""

from __future__ import annotations

from dataclasses import dataclass, field

from .training import PhaseRow, StepTimes

BASELINE_VERSION = 1


@dataclass(frozen=True)
class Baseline:
    version: int
    created: str  # ISO 8601, local time with offset
    source: str  # what it was measured on: "PID 4711 for 30 s" or "recording run.jsonl"
    step_ms: list[float]  # the step times themselves (the newest MAX_SAMPLES): the distribution compared against
    command: list[str] = field(default_factory=list)
    gpu_models: list[str] = field(default_factory=list)  # of the GPUs the job used
    rank: int | None = None
    world_size: int | None = None
    steps: int = 0  # steps measured (step_ms may hold fewer)
    step_time_ms: StepTimes | None = None
    steps_per_s: float | None = None
    throughput_per_s: dict[str, float] = field(default_factory=dict)  # the job's own counters
    data_wait_share: float | None = None
    phases: list[PhaseRow] = field(default_factory=list)  # mean per step over the run
    gpu_step_ms: float | None = None  # CUDA events: median GPU time per step
    gpu_activity: dict[str, float] = field(default_factory=dict)  # GPM/NVML field -> mean % on the job's GPUs


@dataclass(frozen=True)
class PhaseDelta:
    name: str
    baseline_ms: float  # per step
    now_ms: float

    @property
    def delta_ms(self) -> float:
        return self.now_ms - self.baseline_ms


@dataclass(frozen=True)
class Comparison:
    """The window of recent steps against the baseline's steps."""

    file: str  # the baseline's file, as given
    state: str  # 'regression' | 'faster' | 'same' | 'too few steps'
    window_steps: int  # recent steps compared
    baseline_steps: int
    p50_ms: float | None = None
    baseline_p50_ms: float | None = None
    ratio: float | None = None  # window median / baseline median: 1.3 is 30% slower
    p_value: float | None = None  # one-sided Mann-Whitney U: a window this much slower by chance
    grown: PhaseDelta | None = None  # the phase whose time per step grew most (regressions)
    gpu_grown: PhaseDelta | None = None  # 'GPU step': its work grew by half the step's growth or more
    phases: list[PhaseDelta] = field(default_factory=list)
    steps_per_s: float | None = None
    baseline_steps_per_s: float | None = None
    data_wait_share: float | None = None
    baseline_data_wait_share: float | None = None
    gpu_step_ms: float | None = None
    baseline_gpu_step_ms: float | None = None
    notes: list[str] = field(default_factory=list)  # why the comparison may not be like for like
    since_s: float | None = None  # a regression: how long it has held
