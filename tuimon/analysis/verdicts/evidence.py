"""The numbers the verdicts read, in typed parts: the step window, the loop's syncs, the GPU, the
host (the loop thread, the process, the machine), the DataLoader's workers, collectives, the ranks,
the present moment (an end, a stall) and what was sampled from outside. None: not measured.
monitor/evidence.py builds it from the monitor's state."""

from __future__ import annotations

from dataclasses import field
from typing import NamedTuple

from ...model import (
    CopyTimes,
    DataParallelTimes,
    HotLine,
    JobEnd,
    Memory,
    OpCounts,
    StepInProgress,
    Straggler,
    SyncSite,
)
from ...model.record import record
from ..stall import Stall


class WorkerState(NamedTuple):
    """A DataLoader worker process now."""

    pid: int
    state: str  # psutil's: 'running', 'sleeping', 'disk-sleep', 'zombie', ...
    cpu: float | None  # % of one core


class StalledRank(NamedTuple):
    rank: int | None
    phase: str | None  # its open phase
    phase_s: float | None  # its time there
    where: str | None  # the loop thread's line (a library's with the job's line beside it: "... · from train.py:12")


class WaitingRank(NamedTuple):
    rank: int | None
    collective: str | None  # the last collective it called


@record
class WindowEvidence:
    """The step window: the loop's own timings (the probe's), and what its last counts saw."""

    steps: int = 0
    step_ms: float | None = None
    data_share: float | None = None
    phases: dict[str, float] = field(default_factory=dict)  # share of step time per phase
    optimizer: str | None = None  # the lead optimizer: 'SGD foreach=False fused=False params=600'
    copies: CopyTimes | None = None  # host <-> GPU copies per step
    ops: OpCounts | None = None  # the ops of the last counted step (probe/ops.py)
    data_parallel: DataParallelTimes | None = None  # torch.nn.DataParallel's parts (probe/data_parallel.py)
    kernels_per_step: float | None = None  # from the last capture
    kernel_us: float | None = None


@record
class SyncEvidence:
    """The loop thread's device-to-host syncs."""

    per_step: float | None = None
    share: float | None = None  # of step time, blocked in them
    mean_us: float | None = None
    sites: list[SyncSite] = field(default_factory=list)  # the most blocked first (the most per step where not timed)


@record
class GpuEvidence:
    """The target GPUs over the window (NVML, GPM), and what the job's CUDA side says."""

    gpm: bool = False
    sm_active: float | None = None  # %, GPM
    tensor_active: float | None = None
    fp32_active: float | None = None
    fp16_active: float | None = None
    dram_bw: float | None = None
    util_gpu: float | None = None  # %, the coarse kernel-running time (GPUs without GPM)
    pcie_rx: float | None = None  # bytes/s the GPU received over PCIe (GPM)
    busy_events: float | None = None  # share of step time, a lower bound from CUDA events
    power_share: float | None = None  # power over the limit, 0..1
    cuda: bool | None = None  # the job runs CUDA work (its CUDA events or allocator, or NVML sees it on a GPU)
    memory: Memory | None = None  # the caching allocator's gauges; .growth: the live bytes' line (memory-growth)


@record
class HostEvidence:
    """The loop's thread, the training process and the machine."""

    loop_cpu: float | None = None  # % of one core, the loop's thread
    loop_cpu_wait: float | None = None  # % of the time the loop's thread waited for a core
    job_cpu: float | None = None  # % of one core, the training process's threads together
    cpus: int | None = None  # the machine's cores
    process_state: str | None = None  # psutil's: 'stopped', 'disk-sleep', ...
    hot: list[HotLine] = field(default_factory=list)  # the loop thread's hottest lines, largest first


@record
class WorkersEvidence:
    """The DataLoader's worker processes."""

    count: int | None = None  # num_workers
    cpu: list[float] = field(default_factory=list)  # % per worker process
    alive: int | None = None  # alive now
    states: list[WorkerState] = field(default_factory=list)


@record
class CommEvidence:
    """Time in collectives."""

    share: float | None = None  # of step time (the job's, with ranks)
    mb: float | None = None  # handed to collectives per step (this process)
    gpu: bool = False  # the time from CUDA events (else the loop thread's)


@record
class RanksEvidence:
    """The job's ranks seen on this node."""

    count: int = 0  # 0: one process
    straggler: Straggler | None = None
    stalled: list[StalledRank] = field(default_factory=list)
    holding: list[int | None] = field(default_factory=list)  # ranks the others wait for in a collective
    waiting: list[WaitingRank] = field(default_factory=list)


@record
class PresentEvidence:
    """The present moment: has the process ended, is the loop still making progress."""

    job_end: JobEnd | None = None  # the process has exited: how
    ran_as: str | None = None  # ...and the verdict of its last window while it ran
    stall: Stall | None = None
    step: StepInProgress | None = None  # the step in progress


@record
class OutsideEvidence:
    """A process without the probe (`attach`): HostEvidence.hot holds its main thread's lines, sampled
    from outside (py-spy)."""

    sampled: bool = False
    samples: int = 0
    why: str | None = None  # why no lines yet (py-spy's failure in words, too few samples)


@record
class Evidence:
    has_channel: bool = True
    window: WindowEvidence = field(default_factory=WindowEvidence)
    sync: SyncEvidence = field(default_factory=SyncEvidence)
    gpu: GpuEvidence = field(default_factory=GpuEvidence)
    host: HostEvidence = field(default_factory=HostEvidence)
    workers: WorkersEvidence = field(default_factory=WorkersEvidence)
    comm: CommEvidence = field(default_factory=CommEvidence)
    ranks: RanksEvidence = field(default_factory=RanksEvidence)
    present: PresentEvidence = field(default_factory=PresentEvidence)
    outside: OutsideEvidence = field(default_factory=OutsideEvidence)
