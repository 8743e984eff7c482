"""A capture window's state as the probe reports it, and what the monitor found in its result."""

from __future__ import annotations

from dataclasses import field

from .record import record
from .vocab import CaptureState

BUSY: tuple[CaptureState, ...] = ("armed", "capturing", "writing")  # a window is on its way


@record
class KernelRow:
    """One of a window's top GPU kernels: its name as the trace or report has it, its launches and
    time in the window, and the launches of every kernel of its function name (what ncu's
    --launch-skip counts: capture/ncu.py)."""

    name: str
    calls: int
    ms: float
    function_calls: int = 0


@record
class CaptureSummary:
    state: str  # 'pending' (being read) | 'done' | 'failed' | 'waiting' (nsys has not written it yet)
    file: str | None = None
    size: int | None = None
    lines: list[str] = field(default_factory=list)  # what a person reads: top kernels, operators, ranges
    error: str | None = None  # why it failed
    kernels_per_step: float | None = None  # GPU kernels the window ran, per step (torch.profiler windows)
    kernel_us: float | None = None  # their mean duration
    kernels: list[KernelRow] = field(default_factory=list)  # the top kernels (torch.profiler, Kineto, nsys)
    ncu_commands: list[str] = field(default_factory=list)  # Nsight Compute, one per top kernel (capture/ncu.py)


@record
class WindowCost:
    """What a capture window cost the job, from the job's own step times (capture/cost.py): the
    steps from the window's first to just past its end (its trace written), against the normal
    steps before it."""

    normal_steps: int  # the steps before the window it is judged against
    worst_normal_ms: float
    typical_ms: float  # their median
    window_steps: int  # the steps the window covered
    steps: int  # the steps judged: the window's and those after it until its work ended
    worst_ms: float  # the longest of them
    worst_step: int  # ...its number
    over: int  # how many of them broke the budget (longer than 1.2x the worst normal step)
    ratio: float  # worst_ms / worst_normal_ms (the budget: 1.2)
    lost_ms: float  # the time the job lost: what those steps took beyond the typical step
    normal_lost_ms: float = 0.0  # what as many normal steps take beyond the typical one (a jittery loop's own share of lost_ms)


@record
class CaptureStatus:
    seq: int  # the request this state answers (0: none yet)
    state: str  # a CaptureState (vocab.py), or the control block's unknown number in words
    kind: str  # 'nsys' | 'torch.profiler'
    first_step: int = 0
    last_step: int = 0
    message: str = ""
    path: str = ""
    updated_ns: int = 0
    summary: CaptureSummary | None = None
    cost: WindowCost | None = None  # a done window's cost to the job, once the steps after it are in

    @property
    def busy(self) -> bool:
        return self.state in BUSY
