"""The diagnosis's evidence, gathered from the monitor's state: the training window's anatomy, the
target GPUs' activity over the same span of time, the loop thread's and DataLoader workers' CPU,
and the last capture's kernel count."""

from __future__ import annotations

from typing import TypedDict

from ..analysis import stall
from ..analysis import thresholds as T
from ..analysis.verdicts import (
    CommEvidence,
    Evidence,
    GpuEvidence,
    HostEvidence,
    OutsideEvidence,
    PresentEvidence,
    RanksEvidence,
    StalledRank,
    SyncEvidence,
    WaitingRank,
    WindowEvidence,
    WorkersEvidence,
    WorkerState,
)
from ..model import (
    CaptureStatus,
    JobEnd,
    OutsideLines,
    ProcessSample,
    ProcRow,
    RankRow,
    Straggler,
    TrainingSnapshot,
)

MIN_SPAN_S, MAX_SPAN_S = 3.0, 60.0  # GPU samples averaged: the step window's span, within these


class GpuMeans(TypedDict):
    """The target GPUs' means over the step window's span (None: not measured), passed to
    GpuEvidence's fields of the same names."""

    sm_active: float | None
    tensor_active: float | None
    fp32_active: float | None
    fp16_active: float | None
    dram_bw: float | None
    util_gpu: float | None
    pcie_rx: float | None


def build(training: TrainingSnapshot | None, process: ProcessSample | None, gpu_means: GpuMeans,
          gpm: bool, captures: list[CaptureStatus], has_channel: bool, ranks: int = 0,
          straggler: Straggler | None = None, job_comm_share: float | None = None, *,
          rows: list[RankRow] | None = None, job_end: JobEnd | None = None,
          power_share: float | None = None, outside: OutsideLines | None = None, cpus: int | None = None,
          on_gpu: bool = False) -> Evidence:
    """ranks, straggler, job_comm_share, rows: the job's (analysis/ranks.py), for 2+ ranks on this
    node; job_end: how the process ended, once it has; power_share: the target GPUs' power of their
    limit (a hang's signature: busy SMs at idle power); outside: no channel, the main thread sampled
    from outside (py-spy); cpus: the machine's cores; on_gpu: NVML sees the job's processes on a GPU."""
    t = training
    if t is None:
        host, sampled = _outside(outside, process)
        return Evidence(has_channel=has_channel, gpu=GpuEvidence(**gpu_means, gpm=gpm, power_share=power_share),
                        host=host, present=PresentEvidence(job_end=job_end), outside=sampled)
    phases = {p.name: p.share for p in t.phases}
    procs = process.procs if process else []
    target = next((r for r in procs if r.loop or r.role == "target"), None)
    kernels = _kernels(captures)
    return Evidence(
        has_channel=True,
        window=WindowEvidence(steps=t.window_steps, step_ms=t.step_time_ms.p50 if t.step_time_ms else None,
                              data_share=t.data_wait_share, phases=phases,
                              optimizer=t.optimizer, copies=t.copies, ops=t.ops, data_parallel=t.data_parallel,
                              kernels_per_step=kernels[0], kernel_us=kernels[1]),
        sync=SyncEvidence(per_step=t.syncs.per_step, share=t.syncs.share, mean_us=t.syncs.mean_us,
                          sites=list(t.syncs.top)) if t.syncs else
        SyncEvidence(share=phases.get("sync")),
        gpu=GpuEvidence(**gpu_means, gpm=gpm, busy_events=t.gpu.busy_share if t.gpu else None, power_share=power_share,
                        # (CUDA events and allocator gauges: CUDA initialized)
                        cuda=on_gpu or t.gpu is not None or t.memory is not None, memory=t.memory),
        host=HostEvidence(loop_cpu=process.loop_cpu if process else None,
                          loop_cpu_wait=process.loop_cpu_wait if process else None,
                          job_cpu=target.cpu_percent if target is not None and isinstance(target.cpu_percent, float)
                          else None, cpus=cpus,
                          process_state=target.state if target is not None and isinstance(target.state, str) else None,
                          hot=sorted(t.hot_lines, key=lambda h: -h.share) if t.samples >= T.HOT_MIN_SAMPLES.value
                          else []),
        workers=_workers(t, procs),
        comm=CommEvidence(share=job_comm_share if ranks else (t.comm.share if t.comm else None),
                          mb=t.comm.mb_per_step if t.comm else None, gpu=bool(t.comm and t.comm.gpu_ms is not None)),
        ranks=_ranks(ranks, straggler, rows or []),
        present=PresentEvidence(job_end=job_end, stall=stall.check(t, process), step=t.now),
    )


def _workers(t: TrainingSnapshot, procs: list[ProcRow]) -> WorkersEvidence:
    """The DataLoader's worker processes (its children named pt_data_worker, else every child)."""
    if not t.dataloader_workers:
        return WorkersEvidence(count=t.dataloader_workers)
    children = [r for r in procs if r.role == "child"]
    loaders = [r for r in children if r.name == "pt_data_worker"] or children
    return WorkersEvidence(
        count=t.dataloader_workers, cpu=[r.cpu_percent for r in loaders if isinstance(r.cpu_percent, float)],
        alive=sum(r.state not in ("zombie", "dead") for r in loaders),
        states=[WorkerState(pid=r.pid, state=r.state if isinstance(r.state, str) else "?",
                            cpu=r.cpu_percent if isinstance(r.cpu_percent, float) else None) for r in loaders])


def _ranks(count: int, straggler: Straggler | None, rows: list[RankRow]) -> RanksEvidence:
    stalled = [r for r in rows if r.stalled]
    holding, waiting = stall.culprits(rows) if stalled else ([], [])
    return RanksEvidence(count=count, straggler=straggler,
                         stalled=[StalledRank(r.rank, r.now_phase, r.now_phase_s,
                                              f"{r.where} · from {r.context}" if r.where and r.context else r.where)
                                  for r in stalled],
                         holding=[r.rank for r in holding], waiting=[WaitingRank(r.rank, r.collective) for r in waiting])


def _outside(o: OutsideLines | None, process: ProcessSample | None) -> tuple[HostEvidence, OutsideEvidence]:
    """What a process without the probe offers the verdict: its main thread's lines and CPU."""
    if o is None:
        return HostEvidence(), OutsideEvidence()
    enough = o.samples >= T.HOT_MIN_SAMPLES.value
    why = ("py-spy cannot sample it" if o.state == "failed" else "the process ended" if o.state == "ended" else
           f"{o.samples} samples so far" if o.samples else "not sampled yet")
    return (HostEvidence(loop_cpu=process.loop_cpu if process else None,
                         loop_cpu_wait=process.loop_cpu_wait if process else None,
                         hot=sorted(o.hot_lines, key=lambda h: -h.share) if enough else []),
            OutsideEvidence(sampled=True, samples=o.samples, why=None if enough else why))


def window_span_s(t: TrainingSnapshot | None) -> float:
    """How far back the step window reaches, in seconds."""
    if t is None or t.step_time_ms is None:
        return MIN_SPAN_S
    return min(MAX_SPAN_S, max(MIN_SPAN_S, t.window_steps * t.step_time_ms.mean / 1e3))


def _kernels(captures: list[CaptureStatus]) -> tuple[float | None, float | None]:
    for c in reversed(captures):
        s = c.summary
        if s is not None and s.kernels_per_step is not None:
            return s.kernels_per_step, s.kernel_us
    return None, None
