"""Every rank of a job on this node: the channels of a launcher's (torchrun's) instrumented
descendants, each drained by its own TrainingView, looked for again every REDISCOVER_S, so ranks
that start or restart (torchrun's elastic restarts: new PIDs, same ranks) are picked up. A rank
whose process ended is marked exited until its rank comes back or, while other ranks run, EXITED_KEEP_S
pass (once every rank has exited, the job's last picture stays)."""

from __future__ import annotations

import time
from dataclasses import replace

from ..analysis import stall
from ..capture.kineto_ranks import RankJob, typical_ms
from ..channel import ChannelError, SegmentReader, find_segments, procinfo
from ..model import GpuSample, RankRow, TrainingSnapshot, num
from ..sources.channel import ChannelSource
from .training import TrainingView

REDISCOVER_S = 1.0
EXITED_KEEP_S = 30.0


def job_root(pid: int, shown: SegmentReader) -> int | None:
    """The process whose descendants are the job's ranks: the launcher asked for, or the parent
    (torchrun's agent) of a rank asked for; None for a job of one process."""
    meta = shown.info.meta
    if meta.rank is None or meta.world_size is None or meta.world_size < 2:
        return None
    if shown.info.pid != pid:
        return pid  # a launcher: its descendants
    return procinfo.parent(pid)


class RankSet:
    def __init__(self, root: int, shown: TrainingView, timeline: bool = False):
        """timeline: every rank's view keeps its steps one by one (TrainingView.take_steps)."""
        self.root, self.timeline = root, timeline
        self.views: dict[int, TrainingView] = {shown.source.reader.info.pid: shown}
        self.exited_at: dict[int, float] = {}
        self._looked_at = 0.0

    def _discover(self) -> None:
        now = time.monotonic()
        if now - self._looked_at < REDISCOVER_S:
            return
        self._looked_at = now
        for f in find_segments(self.root):
            if f.relation != "descendant" or f.pid in self.views:
                continue
            try:
                reader = SegmentReader(f.path)
            except ChannelError:
                continue  # (not readable yet: its writer may be starting)
            if reader.info.meta.rank is not None:
                view = self.views[f.pid] = TrainingView(ChannelSource(reader))
                view.timeline = self.timeline
            else:
                reader.close()

    def poll(self, shown: TrainingView, shown_snap: TrainingSnapshot | None) -> dict[int, TrainingSnapshot]:
        """Drain every rank but the one shown (the session drains that one); their snapshots by PID."""
        self._discover()
        snaps: dict[int, TrainingSnapshot] = {}
        now = time.monotonic()
        for pid, view in list(self.views.items()):
            if view is shown:
                snap = shown_snap
            else:
                try:
                    view.poll()
                    snap = view.snapshot()
                except ChannelError:
                    snap = None
            if snap is None or snap.state != "alive":
                self.exited_at.setdefault(pid, now)
            if snap is not None:
                snaps[pid] = snap
        self._forget(snaps, shown, now)
        return snaps

    def _forget(self, snaps: dict[int, TrainingSnapshot], shown: TrainingView, now: float) -> None:
        """Drop exited ranks whose rank came back under a new PID, or that ended long ago."""
        alive_ranks = {s.rank for p, s in snaps.items() if p not in self.exited_at}
        for pid, since in list(self.exited_at.items()):
            s = snaps.get(pid)
            if self.views.get(pid) is shown:
                continue
            if (alive_ranks and now - since >= EXITED_KEEP_S) or s is None or s.rank in alive_ranks:
                view = self.views.pop(pid, None)
                self.exited_at.pop(pid, None)
                snaps.pop(pid, None)
                if view is not None:
                    view.source.reader.close()

    def view_of_rank(self, rank: int) -> TrainingView | None:
        """The live view of that rank (the newest PID if it restarted)."""
        found = [(pid, v) for pid, v in self.views.items()
                 if v.source.reader.info.meta.rank == rank and pid not in self.exited_at]
        return max(found)[1] if found else None

    def rank_of_pid(self) -> dict[int, int]:
        """Each rank's PID (exited ones too) and its rank."""
        return {pid: r for pid, v in list(self.views.items()) if (r := v.source.reader.info.meta.rank) is not None}

    def jobs(self) -> list[RankJob]:
        """(from the capture chooser's thread) The live ranks with the optimizer steps their probes
        counted (None where counted otherwise), their typical step times and their last steps'
        records: how long a window on every rank lasts and which steps it held
        (capture/kineto_ranks.py). Copies first: the sampler's poll may change the views."""
        out = []
        for pid, view in list(self.views.items()):
            reader = view.source.reader
            rank = reader.info.meta.rank
            if rank is None or pid in self.exited_at:
                continue
            try:
                now, steps = reader.now(), reader.steps
            except (ChannelError, ValueError):  # (closed meanwhile: the sampler dropped it)
                continue
            counted = now is not None and now.source == "optimizer" and steps > 0
            recent = tuple(view.step_log.steps)
            out.append(RankJob(rank, pid, steps if counted else None, typical_ms(recent), recent))
        return sorted(out, key=lambda r: (r.rank, r.pid))

    def ranks(self) -> list[int]:
        """(also from the UI thread, while the sampler's poll may add or drop views: a copy first)"""
        views = list(self.views.values())
        return sorted({r for v in views if (r := v.source.reader.info.meta.rank) is not None})

    def close(self, keep: TrainingView | None = None) -> None:
        for view in self.views.values():
            if view is not keep:
                view.source.reader.close()
        self.views.clear()


def rows(snaps: dict[int, TrainingSnapshot], gpus: list[GpuSample] | None, exited: set[int]) -> list[RankRow]:
    """One row per rank, by rank, with the GPU NVML sees its process on and that GPU's activity."""
    on_gpu: dict[int, GpuSample] = {}
    for sample in gpus or []:
        if isinstance(sample.processes, list):
            for p in sample.processes:
                on_gpu.setdefault(p.pid, sample)
    out = []
    for pid, s in snaps.items():
        g = on_gpu.get(pid)
        sm, coarse = (None, False) if g is None else (
            (num(g.sm_active), False) if num(g.sm_active) is not None else (num(g.util_gpu), num(g.util_gpu) is not None))
        st, now = s.step_time_ms, s.now
        row = RankRow(
            rank=s.rank, pid=pid, state="exited" if pid in exited else "alive",
            local_rank=s.local_rank, gpu=g.index if g is not None else None, sm_active=sm, sm_coarse=coarse,
            steps=s.steps, window_steps=s.window_steps,
            step_p50_ms=st.p50 if st else None, step_p95_ms=st.p95 if st else None, step_mean_ms=st.mean if st else None,
            data_wait_share=s.data_wait_share, phases={p.name: p.mean_ms for p in s.phases},
            comm_ms=s.comm.per_step_ms if s.comm else None, comm_share=s.comm.share if s.comm else None,
            ddp_backward_ms=s.ddp_backward_ms, since_step_s=s.since_step_s, longest_step_ms=s.longest_step_ms,
            now_phase=now.phase if now else None, now_phase_s=now.phase_s if now else None,
            where=now.where if now else None, context=now.context if now else None,
            waiting_in=now.waiting_in if now else None,
            collective=now.collective if now else None)
        out.append(replace(row, stalled=stall.rank_check(row)))
    return sorted(out, key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.pid))
