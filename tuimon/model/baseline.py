"""A baseline (a known-good run of a job, saved to a file) and how the running job compares to it."""

from __future__ import annotations

from dataclasses import field

from .record import record
from .training import PhaseRow, StepTimes
from .vocab import ComparisonState

BASELINE_VERSION = 2  # 2: batches (the mean step time's evidence), the peak allocated, GPU step time as a mean


@record
class Baseline:
    version: int
    created: str  # ISO 8601, local time with offset
    source: str  # what it was measured on: "PID 4711 for 30 s" or "recording run.jsonl"
    step_ms: list[float]  # step times (the newest MAX_SAMPLES seen): the median and p95 compared beside the mean
    command: list[str] = field(default_factory=list)
    gpu_models: list[str] = field(default_factory=list)  # of the GPUs the job used
    rank: int | None = None
    world_size: int | None = None
    steps: int = 0  # steps measured past the warm-up (every one, fast or slow)
    step_time_ms: StepTimes | None = None  # mean: every step measured (their time over their count)
    steps_per_s: float | None = None  # 1000 / the mean step time
    throughput_per_s: dict[str, float] = field(default_factory=dict)  # the job's own counters
    data_wait_share: float | None = None
    phases: list[PhaseRow] = field(default_factory=list)  # mean per step over the run
    gpu_step_ms: float | None = None  # CUDA events: mean GPU time per step (layout 1: the median)
    gpu_activity: dict[str, float] = field(default_factory=dict)  # GPM/NVML field -> mean % on the job's GPUs
    batch_steps: list[int] = field(default_factory=list)  # the run cut into batches (analysis/batches.py):
    batch_ms: list[float] = field(default_factory=list)  # ...each one's steps and time; what the t-test reads
    peak_allocated: int | None = None  # bytes: the caching allocator's peak (None: no CUDA allocator, a CPU job)


@record(kw_only=False)
class PhaseDelta:
    name: str
    baseline_ms: float  # per step
    now_ms: float

    @property
    def delta_ms(self) -> float:
        return self.now_ms - self.baseline_ms


@record
class PeakMemory:
    """The caching allocator's peak allocated, the baseline's and now."""

    baseline_bytes: int
    now_bytes: int
    ratio: float
    grew: bool  # by PEAK_MEMORY_FACTOR or more: a regression of its own


@record
class Comparison:
    """The window of recent steps (its newest batches) against the baseline's batches."""

    file: str  # the baseline's file, as given
    state: ComparisonState  # the step time's (collecting: no decision yet)
    progress: str = ""  # while collecting, in words: "collecting: 6 s of 9"
    collected_s: float | None = None  # while collecting: seconds of steps past the warm-up so far
    needed_s: float | None = None  # ...and the seconds a decision needs (0 in the warm-up)
    window_steps: int = 0  # recent steps compared
    baseline_steps: int = 0
    window_s: float | None = None  # the time they span
    batches: int = 0  # their batches, and the baseline's
    baseline_batches: int = 0
    mean_ms: float | None = None  # mean step time: the window's time over its steps
    baseline_mean_ms: float | None = None
    ratio: float | None = None  # mean / the baseline's mean: 1.3 is 30% slower (30% fewer steps per second)
    p_value: float | None = None  # one-sided Welch t-test on batch means: a window this much slower by chance
    p50_ms: float | None = None  # the step times' median and p95: evidence beside the mean
    baseline_p50_ms: float | None = None
    p95_ms: float | None = None
    baseline_p95_ms: float | None = None
    grown: PhaseDelta | None = None  # the phase whose time per step grew most (regressions)
    gpu_grown: PhaseDelta | None = None  # 'GPU step': its work grew by half the step's growth or more
    phases: list[PhaseDelta] = field(default_factory=list)
    steps_per_s: float | None = None  # the window's (1000 / mean_ms)
    baseline_steps_per_s: float | None = None
    throughput_per_s: dict[str, float] = field(default_factory=dict)  # the job's counters (samples/s...)
    baseline_throughput_per_s: dict[str, float] = field(default_factory=dict)
    data_wait_share: float | None = None
    baseline_data_wait_share: float | None = None
    gpu_step_ms: float | None = None  # CUDA events: mean GPU time per step
    baseline_gpu_step_ms: float | None = None
    peak_memory: PeakMemory | None = None  # None: no allocator numbers on one side (a CPU job)
    notes: list[str] = field(default_factory=list)  # why the comparison may not be like for like
    since_s: float | None = None  # a regression: how long it has held
    halted: str | None = None  # the job makes no progress (stalled, or ended other than cleanly), in words

    @property
    def regressed(self) -> bool:
        """Slower (step time), a peak memory that grew, or no progress at all (a job that hangs or
        died has no step time to compare, and is no run as good as its baseline): what exits 3 and
        raises the alert."""
        return (self.state == "regression" or (self.peak_memory is not None and self.peak_memory.grew)
                or self.halted is not None)
