"""Monitor state: the latest samples and their histories, fed one Cycle at a time by apply(),
from live sessions and replays alike. view() returns a frozen copy for drawing (histories copied),
so the UI never reads a list the sampler is appending to."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..analysis import ranks as job_ranks
from ..analysis import stall as loop_stall
from ..analysis import thresholds as T
from ..analysis.batches import StepBatches
from ..analysis.ending import job_end
from ..analysis.regression import Reference, compare, no_progress
from ..analysis.verdicts import Verdict, diagnose
from ..model import (
    NA,
    Baseline,
    CaptureStatus,
    Comparison,
    Cycle,
    GpuSample,
    HostSample,
    JobEnd,
    OutsideLines,
    ProcessSample,
    RankRow,
    Straggler,
    TrainingSnapshot,
    num,
)
from ..model.record import record
from . import evidence

GPU_SERIES = ("sm_active", "tensor_active", "fp32_active", "fp16_active", "dram_bw", "power_w", "util_gpu",
              "util_mem", "mem_used", "pcie_rx", "t")
COLUMN_S = 5  # the main screen's sparklines: one column per 5 s, on one time axis for all of them
COLUMNS = 240  # 20 min of columns
# A window is the loop's own while its last step ended within this many of its p95 steps: what the
# process does after its loop (an interpreter's teardown, a final save) is not "while it ran".
RAN_STEPS = 3
MEMORY_SERIES = ("allocated", "reserved", "peak", "nvml")  # per cycle: the allocator's gauges, NVML's for the process


@record(kw_only=False)
class GpuView:
    latest: GpuSample
    history: dict[str, list]  # field -> every sample's value (None where unavailable), oldest first
    columns: dict[str, list] = field(default_factory=dict)  # field -> mean per COLUMN_S, oldest first


class _Mean:
    """A running mean: a column keeps its values' sum and count, not the values (a 10 ms-step job's
    column held 500 step times, and COLUMNS of them were kept)."""

    __slots__ = ("n", "total")

    def __init__(self) -> None:
        self.total, self.n = 0.0, 0

    def add(self, v: float) -> None:
        self.total += v
        self.n += 1

    @property
    def value(self) -> float | None:
        return self.total / self.n if self.n else None


@dataclass
class _Column:
    """What the samples of one COLUMN_S of time held, as means. Columns are aligned to absolute time,
    so a finished column never changes: only the newest one moves (and the terminal gets one cell)."""

    gpu: dict[int, dict[str, _Mean]] = field(default_factory=dict)
    step_ms: _Mean = field(default_factory=_Mean)
    gpu_step_ms: _Mean = field(default_factory=_Mean)  # the window's mean GPU step time, per cycle


def _gpu_mean(i: int, f: str) -> Callable[[_Column], float | None]:
    """A column's mean of GPU i's field f (None: GPU i has no sample in that column)."""
    return lambda c: c.gpu[i][f].value if i in c.gpu else None


@record
class View:
    training: TrainingSnapshot | None
    process: ProcessSample | None
    gpus: list[GpuView]
    step_ms: list[float]  # the last steps' times, oldest first
    verdict: Verdict
    target_gpus: list[int]
    gpu_note: str | None = None
    paused: bool = False
    capture: CaptureStatus | None = None
    captures: list[CaptureStatus] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)  # source -> reason, as of the last cycle
    channel: str | NA | None = None  # the segment read, or why there is none
    shown_why: str | None = None  # why the process shown is not the one asked for
    step_columns: list = field(default_factory=list)  # mean step time per COLUMN_S (None: no step ended)
    gpu_step_columns: list = field(default_factory=list)  # the GPU side of the step, per COLUMN_S
    nvml_memory: tuple = (None, None)  # (bytes NVML counts for the target's processes, total of its GPUs)
    host: HostSample | None = None
    job_log: str | None = None
    job_tail: list[str] = field(default_factory=list)
    baseline: Comparison | None = None  # the job against a baseline, where one was given
    ranks: list[RankRow] = field(default_factory=list)  # every rank of a multi-process job (else empty)
    straggler: Straggler | None = None  # the slowest rank's own work against the others' (2+ ranks)
    comm_share: float | None = None  # the job's share of step time in collectives (the ranks' mean)
    job_end: JobEnd | None = None  # how the process ended, once it has
    stall: loop_stall.Stall | None = None  # the shown loop's progress
    outside: OutsideLines | None = None  # no channel: the main thread sampled from outside (attach)
    memory_history: dict[str, list] = field(default_factory=dict)  # MEMORY_SERIES -> bytes per cycle, oldest first


def _stepping(t: TrainingSnapshot | None) -> bool:
    """Is the loop stepping as this window ends (its last step within RAN_STEPS of its p95 steps)?"""
    if t is None or t.state != "alive" or t.since_step_s is None or t.step_time_ms is None:
        return False
    return t.since_step_s * 1e3 <= RAN_STEPS * max(t.step_time_ms.p95, t.step_time_ms.last)


def new_step_times(seen: int, snap: TrainingSnapshot) -> list[float]:
    """The times of the steps that ended after the first `seen` (as many as the snapshot still
    holds: its last 120)."""
    new = snap.steps - seen
    if new <= 0:
        return []
    if snap.recent_step_ms:
        return snap.recent_step_ms[-min(new, len(snap.recent_step_ms)):]
    if snap.step_time_ms is not None:
        return [snap.step_time_ms.last]  # recordings made before recent_step_ms
    return []


class MonitorState:
    def __init__(self, history: int = 600, baseline: tuple[str, Baseline] | None = None):
        """baseline: (its file, as given; the baseline) to compare the job against."""
        self.history = history
        self.training: TrainingSnapshot | None = None
        self.process: ProcessSample | None = None
        self._live_process: ProcessSample | None = None
        self._ran: Verdict | None = None  # the verdict of the newest window while the loop stepped
        self.gpus: dict[int, GpuSample] = {}
        self._gpu_hist: dict[int, dict[str, deque]] = {}
        self._step_ms: deque = deque(maxlen=history)
        self._last_step = 0
        self.gpu_note: str | None = None
        self.capture: CaptureStatus | None = None
        self.captures: dict[tuple[bool, int], CaptureStatus] = {}  # (Kineto's?, seq) -> last state seen, first seen
        # first (a Kineto window's seq counts from 1 beside the probe's or the nsys session's)
        self.problems: dict[str, str] = {}
        self.channel: str | NA | None = None
        self.shown_why: str | None = None
        self.cycles = 0
        self.host: HostSample | None = None
        self.job_log: str | None = None
        self.job_tail: list[str] = []
        self._columns: deque[_Column] = deque(maxlen=COLUMNS)
        self._column_id: int | None = None
        # The finished columns' means, series by series (all columns but the newest, which alone
        # changes): a view copies these instead of reading every column's means again.
        self._done_steps: deque[float | None] = deque(maxlen=COLUMNS - 1)
        self._done_gpu_steps: deque[float | None] = deque(maxlen=COLUMNS - 1)
        self._done_gpu: dict[int, dict[str, deque[float | None]]] = {}
        self.baseline = baseline
        self._reference = Reference(baseline[1]) if baseline is not None else None
        self._batches = StepBatches(int(T.REGRESSION_BATCHES.value))  # the job's newest steps, for the comparison
        self._comparison: Comparison | None = None
        self._regression_since: int | None = None  # the cycle time (ns) the regression was first seen
        self.ranks: list[RankRow] = []
        self.outside: OutsideLines | None = None
        self._memory_hist: dict[str, deque[int | None]] = {k: deque(maxlen=history) for k in MEMORY_SERIES}

    def _column(self, t: int) -> _Column:
        cid = t // (COLUMN_S * 1_000_000_000)
        if self._column_id is None or cid > self._column_id:
            gap = 0 if self._column_id is None else min(cid - self._column_id - 1, COLUMNS)
            if self._columns:
                self._finish(self._columns[-1])
            for _ in range(gap):  # time with no sample shows as empty columns
                self._columns.append(_Column())
                self._finish(self._columns[-1])
            self._columns.append(_Column())
            self._column_id = cid
        return self._columns[-1]

    def _finish(self, col: _Column) -> None:
        """A column no longer the newest: its means joined to the finished columns' series."""
        self._done_steps.append(col.step_ms.value)
        self._done_gpu_steps.append(col.gpu_step_ms.value)
        for i, series in self._done_gpu.items():
            means = col.gpu.get(i)
            for f in GPU_SERIES:
                series[f].append(means[f].value if means is not None else None)

    def apply(self, c: Cycle) -> None:
        self.cycles += 1
        col = self._column(c.t)
        if c.gpus is not None:
            for s in c.gpus:
                self.gpus[s.index] = s
                hist = self._gpu_hist.setdefault(s.index, {f: deque(maxlen=self.history) for f in GPU_SERIES})
                if s.index not in self._done_gpu:  # (a GPU first seen now: none in the columns before)
                    self._done_gpu[s.index] = {f: deque([None] * (len(self._columns) - 1), maxlen=COLUMNS - 1)
                                               for f in GPU_SERIES}
                means = col.gpu.setdefault(s.index, {f: _Mean() for f in GPU_SERIES})
                for f in GPU_SERIES:
                    v = num(getattr(s, f))
                    hist[f].append(v)
                    if v is not None:
                        means[f].add(v)
        if c.process is not None:
            self.process = c.process
            if c.process.alive:  # the verdict's: a job that exited keeps its last live reading
                self._live_process = c.process
        if c.training is not None:
            self._add_memory(c.training)
            if self.training is not None and c.training.pid != self.training.pid:
                self._last_step = 0  # another process shown (another rank): its own step count
                self._step_ms.clear()
            for ms in self._add_steps(c.training):
                col.step_ms.add(ms)
            g = c.training.gpu
            gpu_ms = None if g is None else g.step_mean_ms if g.step_mean_ms is not None else g.step_ms
            if gpu_ms is not None:
                col.gpu_step_ms.add(gpu_ms)
            self.training = c.training
        if c.capture is not None:
            self.capture = c.capture
            if c.capture.seq:
                self.captures[(c.capture.kind == "kineto", c.capture.seq)] = c.capture
        if c.channel is not None:
            self.channel, self.shown_why = c.channel, c.shown_why
        self.gpu_note = c.gpu_note
        if c.gpus == [] and "gpu" not in c.problems and not self.gpus:  # sampled, and none there
            self.gpu_note = "no GPU samples (NVML found no GPU where this ran)"
        self.problems = dict(c.problems)  # a source that recovered clears its problem
        if c.host is not None:
            self.host = c.host
        if c.job_log is not None:
            self.job_log, self.job_tail = c.job_log, c.job_tail
        if c.ranks or c.training is not None:
            self.ranks = list(c.ranks)
        if c.outside is not None or c.training is not None:
            self.outside = c.outside
        if self.baseline is not None:
            self._batches.add(c.training)
            self._compare(c.t, *self.baseline)

    def _add_memory(self, t: TrainingSnapshot) -> None:
        """The allocator's gauges and NVML's number for the process, once a cycle (another process
        shown starts its own history)."""
        if self.training is not None and t.pid != self.training.pid:
            for d in self._memory_hist.values():
                d.clear()
        m = t.memory
        if m is None:
            return
        nvml = self._nvml_memory()[0]
        for k, v in zip(MEMORY_SERIES, (m.allocated, m.reserved, m.peak_allocated, nvml), strict=True):
            self._memory_hist[k].append(v)

    def _compare(self, t_ns: int, file: str, baseline: Baseline) -> None:
        """Once per cycle (not per view): the comparison sorts the baseline's steps."""
        models = [s.name for i in self.target_gpus() if isinstance((s := self.gpus[i]).name, str)]
        cmp = compare(baseline, file, self.training, self._batches, models, self._reference)
        if not cmp.regressed:
            self._regression_since = None
        else:
            if self._regression_since is None:
                self._regression_since = t_ns
            cmp = replace(cmp, since_s=round((t_ns - self._regression_since) / 1e9, 1))
        self._comparison = cmp

    def _add_steps(self, snap: TrainingSnapshot) -> list[float]:
        """The times of the steps that ended since the last snapshot."""
        added, self._last_step = new_step_times(self._last_step, snap), snap.steps
        self._step_ms.extend(added)
        return added

    def target_gpus(self) -> list[int]:
        return sorted(i for i, s in self.gpus.items() if s.uses_target)

    def view(self, paused: bool = False) -> View:
        gpus = [GpuView(self.gpus[i], {f: list(v) for f, v in self._gpu_hist[i].items()}, self._gpu_columns(i))
                for i in sorted(self.gpus)]
        straggler, comm_share = job_ranks.straggler(self.ranks), job_ranks.comm_share(self.ranks)
        ended = self._job_end()
        verdict = self._verdict(straggler, comm_share, ended)
        comparison = self._comparison
        if comparison is not None:  # (a job that hangs or died fails against its baseline)
            comparison = no_progress(comparison, verdict, ended)
        return View(training=self.training, process=self.process, gpus=gpus, step_ms=list(self._step_ms),
                    verdict=verdict, target_gpus=self.target_gpus(),
                    gpu_note=self.gpu_note, paused=paused, capture=self.capture,
                    captures=list(self.captures.values()), problems=dict(self.problems),
                    channel=self.channel, shown_why=self.shown_why,
                    step_columns=self._series(self._done_steps, lambda c: c.step_ms.value),
                    gpu_step_columns=self._series(self._done_gpu_steps, lambda c: c.gpu_step_ms.value),
                    nvml_memory=self._nvml_memory(), host=self.host, job_log=self.job_log,
                    job_tail=list(self.job_tail), baseline=comparison, ranks=list(self.ranks),
                    straggler=straggler, comm_share=comm_share, job_end=ended,
                    stall=loop_stall.check(self.training, self._live_process), outside=self.outside,
                    memory_history={k: list(v) for k, v in self._memory_hist.items()})

    def _job_end(self) -> JobEnd | None:
        """How the process ended, once its sampler saw it gone (or its channel says it exited)."""
        p, t = self.process, self.training
        gone = (p is not None and not p.alive) or (p is None and t is not None and t.state != "alive")
        if not gone:
            return None
        code = p.exit_code if p is not None else None  # (tuimon started it), else the job's own word
        if code is None and t is not None:
            code = t.exit_code
        return job_end(exit_code=code, probe_end=t.end if t else None,
                       probe_text=t.end_text if t else "", log=self.job_log, log_tail=self.job_tail)

    def _nvml_memory(self) -> tuple:
        """What NVML counts for the target's processes on its GPUs, and those GPUs' total."""
        pids = {r.pid for r in self.process.procs} if self.process else set()
        if self.training is not None:
            pids.add(self.training.pid)
        used = total = None
        for i in self.target_gpus():
            s = self.gpus[i]
            if isinstance(s.processes, list):
                mine = [p.gpu_mem for p in s.processes if p.pid in pids and p.gpu_mem is not None]
                if mine:
                    used = (used or 0) + sum(mine)
            if (mem_total := num(s.mem_total)) is not None:
                total = (total or 0) + mem_total
        return used, total

    def _gpu_columns(self, i: int) -> dict[str, list]:
        done = self._done_gpu.get(i)
        if done is None:
            return {f: [c.gpu[i][f].value if i in c.gpu else None for c in self._columns] for f in GPU_SERIES}
        return {f: self._series(done[f], _gpu_mean(i, f)) for f in GPU_SERIES}

    def _series(self, done: deque, newest: Callable[[_Column], float | None]) -> list:
        """A series per column, oldest first: the finished columns' values, then the newest's."""
        return [*done, newest(self._columns[-1])] if self._columns else []

    def _verdict(self, straggler: Straggler | None, comm_share: float | None, ended: JobEnd | None = None) -> Verdict:
        """straggler, comm_share: the job's, from its ranks (None: one process); ended: how it ended."""
        used = self.target_gpus() or sorted(self.gpus)
        span_ns = evidence.window_span_s(self.training) * 1e9

        def mean(f: str) -> float | None:  # the target GPUs' mean over the span the step window covers
            per_gpu = [m for i in used if (m := self._window_mean(i, f, span_ns)) is not None]
            return sum(per_gpu) / len(per_gpu) if per_gpu else None

        means = evidence.GpuMeans(sm_active=mean("sm_active"), tensor_active=mean("tensor_active"),
                                  fp32_active=mean("fp32_active"), fp16_active=mean("fp16_active"),
                                  dram_bw=mean("dram_bw"), util_gpu=mean("util_gpu"), pcie_rx=mean("pcie_rx"))
        gpm = any(self.gpus[i].gpm for i in used)
        has_channel = self.training is not None or not isinstance(self.channel, NA)
        e = evidence.build(self.training, self._live_process, means, gpm,
                           list(self.captures.values()), has_channel,
                           len(self.ranks), straggler, comm_share, rows=self.ranks, power_share=self._power_share(used),
                           outside=self.outside if self.training is None else None,
                           cpus=self.host.cpus if self.host is not None else None, on_gpu=bool(self.target_gpus()))
        if ended is None:
            v = diagnose(e)
            if _stepping(self.training) and v.code not in ("waiting", "exited", "stalled"):
                self._ran = v
            return v
        # what its last window was while the loop stepped, kept with its numbers then (not the teardown
        # after its last step); seen only after its end, from the window up to its last step
        ran = self._ran or diagnose(replace(e, present=replace(e.present, stall=None)))
        ran_as = f"{ran.headline}: {ran.evidence}" if ran.code not in ("waiting", "exited") else None
        return diagnose(replace(e, present=replace(e.present, job_end=ended, ran_as=ran_as)))

    def _power_share(self, used: list[int]) -> float | None:
        """The GPUs' latest power over their limit: a hung collective spins its SMs at near idle power."""
        shares = [w / lim for i in used if (w := num(self.gpus[i].power_w)) is not None
                  and (lim := num(self.gpus[i].power_limit_w))]
        return round(sum(shares) / len(shares), 3) if shares else None

    def _window_mean(self, i: int, f: str, span_ns: float) -> float | None:
        hist = self._gpu_hist.get(i)
        if not hist or not hist["t"]:
            return None
        since = hist["t"][-1] - span_ns
        vals = []
        for t, v in zip(reversed(hist["t"]), reversed(hist[f]), strict=True):  # newest first
            if t is None:
                continue
            if t < since:
                break  # (a GPU's samples are in time order: the rest are older still)
            if v is not None:
                vals.append(v)
        return sum(vals) / len(vals) if vals else None
