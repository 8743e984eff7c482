"""The typed model of what tuimon samples: GPU and process samples, training snapshots, capture
states, and the cycle that carries one poll of all of them. Stdlib only, so every layer above
(sources, analysis, capture, monitor, ui, cli) can build and read the same types.

Every type is a frozen dataclass that goes to JSON and back (codec.py): recordings, `attach
--once --json` and the replay path all use that one codec. A value that could not be read is an
NA carrying its reason, never a made-up number."""

from .baseline import BASELINE_VERSION, Baseline, Comparison, PeakMemory, PhaseDelta
from .capture import CaptureStatus, CaptureSummary, KernelRow, WindowCost
from .codec import BadValue, from_json, to_json
from .cycle import Cycle
from .gpu import GpuProcess, GpuSample
from .outside import OUTSIDE_PHASE, OutsideLines
from .process import HostSample, ProcessSample, ProcRow
from .timeline import ProcessSteps, TimelineStep
from .training import (
    CommTimes,
    CopyTimes,
    DataParallelTimes,
    GpuTimes,
    HotLine,
    JobEnd,
    Memory,
    MemoryGrowth,
    OpCounts,
    PhaseRow,
    RangeRow,
    RankRow,
    StepInProgress,
    StepTimes,
    Straggler,
    Syncs,
    SyncSite,
    TrainingSnapshot,
)
from .values import NA, is_na, num, reason

__all__ = [
    "BASELINE_VERSION", "NA", "Baseline", "Comparison", "PeakMemory", "PhaseDelta", "BadValue", "CaptureStatus", "CaptureSummary", "KernelRow", "CommTimes", "CopyTimes", "Cycle", "DataParallelTimes", "GpuProcess", "GpuSample", "GpuTimes", "HostSample", "HotLine", "JobEnd", "Memory", "MemoryGrowth", "OpCounts",
    "OUTSIDE_PHASE", "OutsideLines",
    "PhaseRow", "ProcRow", "ProcessSample", "RangeRow", "RankRow", "StepInProgress", "StepTimes", "Straggler", "SyncSite", "Syncs", "TrainingSnapshot",
    "ProcessSteps", "TimelineStep", "WindowCost", "from_json", "is_na", "num", "reason", "to_json",
]
