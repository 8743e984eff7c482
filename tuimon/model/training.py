"""What a training process says about itself through its channel, summarised over a window of
recent steps."""

from __future__ import annotations

from dataclasses import field

from .record import record


@record
class StepTimes:
    p50: float
    p95: float
    p99: float
    mean: float
    last: float


@record
class RangeRow:
    name: str
    count: int
    mean_ms: float
    p95_ms: float
    share: float | None  # of the window's step time (nested ranges overlap their parents)
    depth: int


@record(kw_only=False)
class PhaseRow:
    """A phase of the step on the loop thread: data, forward, backward, optimizer, sync or other."""

    name: str
    share: float  # of the window's step time (the phases of a step add up to it)
    mean_ms: float  # per step


@record
class GpuTimes:
    """The GPU side of the steps, from CUDA events (see tuimon/probe/gpu_timing.py)."""

    steps: int  # steps measured in the window (short steps are sampled)
    step_ms: float | None = None  # median GPU time between a step's boundary events
    step_mean_ms: float | None = None  # ...and their mean (beside the host's mean step time)
    busy_share: float | None = None  # at least this share of step time the GPU had work queued
    idle_share: float | None = None  # at most this share it had none (1 - busy_share)
    lag_ms: float | None = None  # median queued GPU work when the host finished a step (0: the GPU waited)


@record
class CommTimes:
    """Time the step spends in collectives (see tuimon/probe/comm.py): on the loop thread (the
    "comm" phase: gloo blocks there) and on the GPU (CUDA events: NCCL makes the stream wait)."""

    host_ms: float  # per step, the "comm" phase
    gpu_ms: float | None = None  # per step, where CUDA events measured it
    share: float = 0.0  # of step time: the GPU's where measured, else the host's
    mb_per_step: float | None = None  # tensors handed to collectives (DDP's gradient buckets included)
    calls_per_step: float | None = None

    @property
    def per_step_ms(self) -> float:
        return self.gpu_ms if self.gpu_ms is not None else self.host_ms


@record
class RankRow:
    """One rank of a multi-process job, as its own channel says, over its own window of steps."""

    rank: int | None
    pid: int
    state: str = "alive"  # 'alive' | 'exited' (kept until its rank comes back or the job ends)
    local_rank: int | None = None
    gpu: int | None = None  # the GPU NVML sees it on
    sm_active: float | None = None  # that GPU's SM activity (GPM), else its coarse utilization
    sm_coarse: bool = False  # sm_active is NVML's utilization.gpu, not GPM
    steps: int = 0
    window_steps: int = 0
    step_p50_ms: float | None = None
    step_p95_ms: float | None = None
    step_mean_ms: float | None = None
    data_wait_share: float | None = None
    phases: dict[str, float] = field(default_factory=dict)  # ms per step, by phase
    comm_ms: float | None = None  # per step (CommTimes.per_step_ms)
    comm_share: float | None = None
    ddp_backward_ms: float | None = None  # DDP's own timing of its backward's compute
    since_step_s: float | None = None  # since its last step ended (None: none yet)
    longest_step_ms: float | None = None  # its longest step so far, warm-up left out
    now_phase: str | None = None  # the phase it is in now (None: not said yet, or exited)
    now_phase_s: float | None = None  # ...for this long
    where: str | None = None  # the rank's loop thread: its line, by the hot lines' rule (StepInProgress.where)
    waiting_in: str | None = None  # ...and its innermost frame, when elsewhere
    context: str | None = None  # ...where that line is a library's: the job's own line that led there
    collective: str | None = None  # the last collective it called
    stalled: bool = False  # no progress far beyond its own history (analysis/stall.py)

    @property
    def own_ms(self) -> float | None:
        """The rank's own work per step: its step less the time it waited in collectives."""
        if self.step_mean_ms is None:
            return None
        return max(0.0, self.step_mean_ms - (self.comm_ms or 0.0))


@record
class Straggler:
    """The rank whose own work per step (its step less its waits in collectives) is the longest,
    against the other ranks'; named a straggler by the diagnosis past its threshold."""

    rank: int | None
    pid: int
    ratio: float  # its own work / the others'
    own_ms: float
    others_ms: float  # the others' own work (analysis/ranks.py: the tighter of two bounds)
    slower: dict[str, float] = field(default_factory=dict)  # phase -> ms/step more than the others, largest first
    others_measured_ms: float | None = None  # the median of what the others measure (their step less their wait)


@record
class DataParallelTimes:
    """torch.nn.DataParallel's parts per step, timed on the loop thread (probe/data_parallel.py):
    replicating the model to every GPU, scattering the inputs, waiting in the replicas' join
    (parallel_apply) and gathering the outputs; all inside the forward phase."""

    devices: int  # the GPUs it runs on (its device_ids)
    steps: int  # steps of the window it ran in
    replicate_ms: float  # per step
    scatter_ms: float
    apply_ms: float  # the loop thread waiting while the replicas run their forward on DataParallel's threads
    gather_ms: float
    replicate_share: float  # of the window's step time
    scatter_gather_share: float
    apply_share: float
    gpu_ms: float | None = None  # the replicas' forward on their own devices' streams, the slowest device
    gpu_steps: int = 0  # steps with that GPU time (CUDA events; a measured step in ~160 ms)

    @property
    def own_share(self) -> float:
        """DataParallel's own work on the loop thread: replicate, scatter and gather."""
        return self.replicate_share + self.scatter_gather_share


@record
class CopyTimes:
    """Copies between the host and the GPU per step (probe/copies.py): host-to-device ones are the
    "copy" phase; device-to-host ones are syncs, counted here by their bytes."""

    share: float  # of step time: the copy phase
    ms: float  # per step, in the copy phase
    h2d_mb: float  # host to device, per step
    pageable: float  # of those bytes, the share from pageable (not pinned) memory
    blocking: float  # ...the share copied without non_blocking=True
    calls: float  # host-to-device copies per step
    d2h_mb: float = 0.0  # device to host, per step


@record
class OpCounts:
    """The ops one counted step dispatched (probe/ops.py: one step in N, under a dispatch mode)."""

    step: int  # the step counted
    total: int
    by_phase: dict[str, int] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)  # the job's lines that issued them, the most first


@record
class HotLine:
    """A line where the loop thread's samples fell (probe/sampler.py), in a phase: the job's own, or
    an installed library's (transformers, lightning ...) with the job's own line that led there."""

    phase: str
    line: str  # "train.py:41 in main `x = batch.to(device)`"
    samples: int
    share: float  # of all the window's samples: about this share of the loop's time
    phase_share: float  # of the phase's samples
    python: float = 0.0  # of its own samples: running Python
    native: float = 0.0  # in a native call, on a CPU
    waiting: float = 0.0  # in a native call, blocked (sleep, lock, I/O, the GPU)
    context: str = ""  # a library's line: the job's own line that led there, "hf_train.py:40" ("": the job's own)

    @property
    def where(self) -> str:
        """The line, and its context beside it: "transformers/trainer.py:2231 ... · from hf_train.py:40"."""
        return f"{self.line} · from {self.context}" if self.context else self.line


@record(kw_only=False)
class SyncSite:
    site: str  # file:line of the code that synced (the first frame outside torch and tuimon)
    per_step: float  # estimated from sampled call sites
    share: float | None = None  # of step time, the loop blocked here (estimated: a sampled sync's own wait x
    #   the syncs it stands for; probe/anatomy.py walk); None: a probe (a recording) that did not time its sites


@record
class Syncs:
    """Device-to-host syncs of the loop thread (.item(), .cpu(), torch.cuda.synchronize(), ...)."""

    per_step: float
    share: float  # of step time, blocked in them
    mean_us: float  # one sync's wait
    top: list[SyncSite] = field(default_factory=list)  # the most blocked first (the most per step where not timed)


@record
class MemoryGrowth:
    """The live tensors (cuda.allocated) over the newest reads of the allocator (analysis/memory.py
    growth: a least-squares line through them), and the high-water mark beside them."""

    reads: int  # of cuda.allocated, in the window
    span_s: float  # from the first of them to the newest
    rate: float | None  # bytes/s, the line's slope (None: the reads span no time)
    fit: float  # R^2 of that line: 1 steady growth, 0 no trend
    per_step: float | None = None  # bytes a step: the same reads against the step each was read in
    peak_rate: float | None = None  # bytes/s, the line through cuda.peak_allocated over the window's newest third
    allocated: int | None = None  # the newest read
    peak: int | None = None  # the newest read of cuda.peak_allocated


@record
class Memory:
    """The caching allocator's numbers for the loop's GPU (bytes), read every ~0.5 s
    (analysis/memory.py)."""

    allocated: int | None = None
    reserved: int | None = None
    peak_allocated: int | None = None
    alloc_retries: int | None = None  # cudaMalloc retries after freeing the cache: memory pressure
    ooms: int | None = None
    inactive_split: int | None = None  # reserved bytes in split blocks not in use (fragmentation)
    peak_reserved: int | None = None
    total: int | None = None  # the device's memory
    limit: int | None = None  # the allocator's cap, where the job set a per-process memory fraction
    # Over the reads from the start of step retries_from to the start of step retries_to (0: not measured):
    retries_per_step: float | None = None
    retries_from: int = 0
    retries_to: int = 0
    ooms_in_window: int | None = None  # out-of-memory errors the job caught and went on after
    expandable: bool | None = None  # PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True
    growth: MemoryGrowth | None = None  # the live tensors over the newest reads (None: fewer than two)

    @property
    def capacity(self) -> int | None:
        """What the allocator may use: its cap, else the device's memory."""
        return self.limit or self.total


@record
class StepInProgress:
    """What the loop is doing now, as the probe's control thread said it (every ~0.2 s)."""

    step: int  # the step in progress (the number it will have)
    phase: str  # the innermost open phase: data, forward, backward, optimizer, sync, comm or other
    phase_s: float  # how long it has been the innermost open phase
    step_s: float | None  # how long the step in progress has run (None: no step boundary yet)
    still_s: float  # since the phase clock last moved (no phase entered or left, no sync)
    where: str | None = None  # the loop thread's line, by the hot lines' rule: the job's own, or a library's
    waiting_in: str | None = None  # ...and its innermost frame, when elsewhere (a call it waits in)
    age_s: float = 0.0  # how old this reading was when sampled
    collective: str | None = None  # the last collective the loop called (what a stalled rank may wait in)
    context: str | None = None  # where is a library's line: the job's own line that led there, "train.py:12"

    @property
    def at(self) -> str:
        """The line, and its context beside it (as HotLine.where): "transformers/trainer.py:2231 in
        training_step · from train.py:12"; "" where none was said."""
        if not self.where:
            return ""
        return f"{self.where} · from {self.context}" if self.context else self.where


@record
class JobEnd:
    """How the job ended, as far as tuimon can know it (analysis/ending.py)."""

    how: str  # 'exception' | 'exit code' | 'signal' | 'clean' | 'unknown'
    headline: str  # one line: "exited with code 1: torch.OutOfMemoryError: CUDA out of memory. ..."
    exit_code: int | None = None  # where tuimon started the job; negative: the signal that ended it
    exception: str | None = None  # "Type: message", from the probe or the job's output
    frames: list[str] = field(default_factory=list)  # the exception's innermost frames, as the probe saw them
    log: str | None = None  # the job's output, where tuimon started it
    log_tail: list[str] = field(default_factory=list)  # its last lines


@record
class TrainingSnapshot:
    pid: int
    state: str = "alive"  # 'alive' | 'exited' | 'reused'
    closed: bool = False  # the process exited cleanly
    argv: list[str] = field(default_factory=list)
    argv_cut: int = 0  # arguments left out at the end of argv (the channel's header had no room)
    rank: int | None = None
    world_size: int | None = None
    local_rank: int | None = None
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
    comm: CommTimes | None = None
    memory: Memory | None = None
    dataloader_workers: int | None = None
    ddp_backward_ms: float | None = None  # DDP's own timing of its backward's compute (a sampled iteration)
    loop_tid: int | None = None  # the OS thread that steps
    step_source: str | None = None  # what counts the steps: optimizer, tuimon.step, backward, forward, dataloader
    since_step_s: float | None = None  # since the last step ended (None: none yet)
    longest_step_ms: float | None = None  # the longest step of the job so far, its warm-up left out
    now: StepInProgress | None = None
    end: str | None = None  # how the probe saw the job end: 'exception' or 'clean' (None: not ended, or killed)
    end_text: str = ""  # for an exception: 'Type: message' and its innermost frames, a line each
    exit_code: int | None = None  # as the process said it at its end; negative: the signal that ended it
    stacks: str | None = None  # every thread's stack, asked for while the loop seemed stuck
    stacks_age_s: float | None = None
    hot_lines: list[HotLine] = field(default_factory=list)  # the loop thread's lines, the largest first
    samples: int = 0  # the loop thread's samples the hot lines come from (the window's)
    optimizer: str | None = None  # the lead optimizer: 'SGD foreach=False fused=False params=600'
    copies: CopyTimes | None = None  # host <-> GPU copies (None: none seen)
    data_parallel: DataParallelTimes | None = None  # torch.nn.DataParallel's parts (None: not seen in the window)
    ops: OpCounts | None = None  # the last counted step's ops (None: none counted yet)
    probe_notes: list[str] = field(default_factory=list)  # what went wrong in the probe, as it said it (a part stopped)
