"""A job's steps as a timeline, per process (rank): from a recording, or from the channels of a
live job (their rings hold the recent records). What each source gives:

- a live job's rings: every step still in them (t0..t1, its phases, its numbers: syncs, comm,
  GPU time), the ranges of tuimon.range and the DataLoader waits at their real times; no GPU
  metrics (the rings hold none);
- a recording (`tuimon record`): every step of every process (Cycle.steps) and the GPU metrics of
  each cycle, no ranges or data waits; a recording made before Cycle.steps gives the steps of the
  process it showed (their times, from recent_step_ms) without phases.

A step's phases are the loop thread's exclusive time in each during the step (they add up to the
step), not when each ran: the probe keeps totals per step, not each phase's start."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..analysis.steps import StepAccumulator
from ..channel import ChannelError, SegmentReader, find_segments
from ..channel import layout as L
from ..model import TimelineStep, TrainingSnapshot, num
from ..sources.recording import Recording
from . import ranks as job_ranks
from .target import open_channel

GPU_SERIES = (("sm_active", "SM active", "%"), ("dram_bw", "DRAM bandwidth", "%"), ("power_w", "power", "W"),
              ("util_gpu", "utilization", "%"))


@dataclass
class ProcessTimeline:
    pid: int
    rank: int | None = None
    steps: dict[int, TimelineStep] = field(default_factory=dict)  # by index
    ranges: list[tuple[str, int, int, int, int]] = field(default_factory=list)  # (name, OS thread, depth, t0, t1)
    data_waits: list[tuple[int, int, int]] = field(default_factory=list)  # (OS thread, t0, t1)
    phases_known: bool = True  # False: the source gave step times alone


@dataclass
class Counter:
    name: str  # "SM active"
    unit: str
    gpu: int
    gpu_name: str
    points: list[tuple[int, float]] = field(default_factory=list)  # (CLOCK_MONOTONIC ns, value)


@dataclass
class Timeline:
    source: str  # what it was read from, in words
    processes: list[ProcessTimeline] = field(default_factory=list)
    counters: list[Counter] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what is missing from it, and why

    def span_ns(self) -> tuple[int, int] | None:
        ts = [t for p in self.processes for s in p.steps.values() for t in (s.t0, s.t1)]
        return (min(ts), max(ts)) if ts else None


# -- from a recording -------------------------------------------------------------------------------

def from_recording(path: str) -> Timeline:
    """Raises RecordingError (not a recording) or OSError."""
    rec = Recording(path)
    tl = Timeline(f"recording {path}")
    procs: dict[int, ProcessTimeline] = {}
    counters: dict[tuple[int, str], Counter] = {}
    fallback: dict[int, ProcessTimeline] = {}  # from recent_step_ms, for recordings without Cycle.steps
    skipped = 0
    for c in rec.cycles():
        for ps in c.steps:
            p = procs.setdefault(ps.pid, ProcessTimeline(ps.pid, ps.rank))
            skipped += ps.skipped
            for s in ps.steps:
                p.steps[s.index] = s
        if not c.steps and c.training is not None and c.training.recent_step_ms:
            _steps_from_snapshot(fallback, c.t, c.training)
        for g in c.gpus or []:
            for attr, name, unit in GPU_SERIES:
                v = num(getattr(g, attr, None))
                if v is not None:
                    key = (g.index, attr)
                    if key not in counters:
                        counters[key] = Counter(name, unit, g.index, g.name if isinstance(g.name, str) else "")
                    counters[key].points.append((c.t, v))
    if not procs and fallback:
        procs = fallback
        tl.notes.append("this recording keeps no steps one by one (made before tuimon kept them): the steps of the "
                        "process it showed, from its last step times, without their phases")
    if skipped:
        tl.notes.append(f"{skipped:,} steps completed between two cycles beyond what one cycle keeps are not in it")
    if rec.skipped:
        tl.notes.append(f"{rec.skipped} unreadable lines of the recording skipped")
    tl.processes = sorted(procs.values(), key=_order)
    tl.counters = [c for c in counters.values() if not (c.name == "utilization" and (c.gpu, "sm_active") in counters)]
    return tl


def _steps_from_snapshot(procs: dict[int, ProcessTimeline], t: int, snap: TrainingSnapshot) -> None:
    """The steps a snapshot says ended since the previous one (its step count grew by as many),
    from its last step times: after the previous cycle's last step, back to back; or, the first
    time (or past a gap longer than the times it keeps), ending when its last step ended."""
    p = procs.setdefault(snap.pid, ProcessTimeline(snap.pid, snap.rank, phases_known=False))
    last = p.steps[max(p.steps)] if p.steps else None
    new = snap.steps - last.index if last is not None else len(snap.recent_step_ms)
    if new <= 0:
        return
    times = snap.recent_step_ms[-new:]
    first = snap.steps - len(times) + 1
    if last is not None and new <= len(snap.recent_step_ms):
        at = last.t1
    else:
        at = t - int((snap.since_step_s or 0.0) * 1e9) - sum(int(ms * 1e6) for ms in times)
    for k, ms in enumerate(times):
        if first + k >= 1:
            p.steps[first + k] = TimelineStep(index=first + k, t0=at, t1=at + int(ms * 1e6))
        at += int(ms * 1e6)


def _order(p: ProcessTimeline) -> tuple[bool, int, int]:
    return (p.rank is None, p.rank if p.rank is not None else 0, p.pid)


# -- from a live job's channels ------------------------------------------------------------------------

def from_live(pid: int, seconds: float) -> Timeline:
    """The last `seconds` of a live job, every rank of it on this node. Raises ChannelError when
    it has no readable channel."""
    reader, why = open_channel(pid)
    tl = Timeline(f"the channels of PID {pid}")
    if why:
        tl.notes.append(why)
    readers = [reader]
    root = job_ranks.job_root(pid, reader)
    if root is not None:
        for f in find_segments(root):
            if f.relation == "descendant" and f.pid != reader.info.pid:
                try:
                    other = SegmentReader(f.path)
                except ChannelError:
                    continue
                if other.info.meta.rank is not None:
                    readers.append(other)
                else:
                    other.close()
    since = time.monotonic_ns() - int(seconds * 1e9)
    try:
        for r in readers:
            tl.processes.append(_from_ring(r, since, tl.notes))
    finally:
        for r in readers:
            r.close()
    tl.processes.sort(key=_order)
    tl.notes.append("no GPU metrics: a live job's channel holds none (a recording does: tuimon record)")
    return tl


def _from_ring(r: SegmentReader, since: int, notes: list[str]) -> ProcessTimeline:
    p = ProcessTimeline(r.info.pid, r.info.meta.rank)
    r.seek_recent(r.info.ring_records)
    batch = r.drain()
    acc = StepAccumulator(history=r.info.ring_records)
    acc.add(batch.records)
    name = r.name
    for s in acc.completed:
        if s.t0 >= since and s.t1 > s.t0:
            p.steps[s.index] = TimelineStep(index=s.index, t0=s.t0, t1=s.t1,
                                            phases={name(k): int(v) for k, v in s.phases.items()},
                                            values={name(k): v for k, v in s.values.items()})
    for rec in batch.records:
        kind, t0, t1 = rec[0], rec[6], rec[7]
        if t0 < since or t1 <= t0:
            continue
        if kind == L.RANGE:
            p.ranges.append((name(rec[3]), rec[4], rec[1], t0, t1))
        elif kind == L.DATA_WAIT:
            p.data_waits.append((rec[4], t0, t1))
    who = f"rank {p.rank}" if p.rank is not None else f"PID {p.pid}"
    if batch.lost:
        notes.append(f"{who}: {batch.lost:,} records were overwritten while being read")
    if p.steps and min(p.steps) > 1 and min(s.t0 for s in p.steps.values()) > since + 1_000_000_000:
        notes.append(f"{who}: its ring holds its steps from step {min(p.steps)} on (older ones are overwritten)")
    return p
