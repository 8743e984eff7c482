"""One poll of every source: what the monitor draws, records and prints, live or replayed."""

from __future__ import annotations

from dataclasses import field

from .capture import CaptureStatus
from .gpu import GpuSample
from .outside import OutsideLines
from .process import HostSample, ProcessSample
from .record import record
from .timeline import ProcessSteps
from .training import RankRow, TrainingSnapshot
from .values import NA


@record
class Cycle:
    t: int  # CLOCK_MONOTONIC ns when the poll began
    process: ProcessSample | None = None
    gpus: list[GpuSample] | None = None  # None: GPUs not sampled (no NVML: see problems['gpu'])
    training: TrainingSnapshot | None = None  # None: no channel (see channel) or not read this cycle
    capture: CaptureStatus | None = None
    channel: str | NA | None = None  # the segment read, or why there is none
    shown_pid: int | None = None  # the process whose channel is shown, when not the one asked for
    shown_why: str | None = None  # ...and why ("PID 812 has no channel; showing its descendant 815")
    problems: dict[str, str] = field(default_factory=dict)  # source -> why it failed this cycle
    gpu_note: str | None = None  # e.g. why the target is missing from every GPU's processes
    host: HostSample | None = None
    job_log: str | None = None  # where the output of a job tuimon launched goes
    job_tail: list[str] = field(default_factory=list)  # its last lines, once it has exited
    ranks: list[RankRow] = field(default_factory=list)  # every rank of the job on this node (2 or more)
    steps: list[ProcessSteps] = field(default_factory=list)  # each process's steps since the last cycle (recordings)
    outside: OutsideLines | None = None  # no channel: the main thread sampled from outside (attach), else None
