"""What a training process says about itself through its channel, as steps and summaries, and
what it is doing now."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from ..analysis import anatomy, summary
from ..analysis import memory as gpu_memory
from ..analysis import thresholds as T
from ..analysis.rolling import RollingWindow
from ..analysis.steps import F_KIND, F_STEP, F_T0, F_T1, STEP, StepAccumulator, StepRecord
from ..capture.cost import StepLog
from ..channel import Batch, SegmentReader
from ..channel import layout as L
from ..channel.control import Now, open_control
from ..model import HotLine, ProcessSteps, StepInProgress, TimelineStep, TrainingSnapshot
from ..sources.channel import ChannelSource

STACKS_KEEP_BYTES = 16 * 1024  # of a stacks dump, in a snapshot (and so in a recording)
HOT_SPAN_S = 10.0  # the loop thread's samples over at least this much time (the step window's, when longer)
TIMELINE_CHUNK_STEPS = 128  # records are folded in chunks of this many steps: none leaves the history unseen
TIMELINE_HOLD_STEPS = 3  # the newest steps wait a cycle: their GPU values come a step or two late
TIMELINE_MAX_PENDING = 20_000
# Records folded at a time: the first poll of a job that has run a while finds a full ring (64k
# records, ~20 MB as Python tuples at once, a high-water mark the monitor's RSS kept: attach beside
# the H100 demo 76.3 MB, in parts 64.5); in parts of this many the same memory serves each part.
DRAIN_PART = 4096
# A first poll finding more than this many records unpacks only the steps the view keeps, and of
# the rest what is not about a step (what the probe said once: the optimizer, what counts steps,
# the workers; the sampler's lines) and the step ends (the longest step, capture costs): attach on
# an H100 beside the demo drew its first frame 65 ms sooner reading the newest 8,192 records alone.
SKIM_ABOVE = DRAIN_PART
SKIM_MAX = 1 << 18  # (a skim copies what it reads at once: 12 MiB at most; a larger ring is folded in parts)
SKIM_KINDS = frozenset((L.GAUGE, L.HOT, L.STEP))
RECENT_STEPS = 120  # the newest steps' times a snapshot carries (the step-time sparkline)

END_WORDS: dict[int, str] = {L.EndKind.EXCEPTION: "exception", L.EndKind.CLEAN: "clean"}  # how the job ended (CTL_END)


class TrainingView:
    def __init__(self, source: ChannelSource, history_steps: int = 256):  # >= the windows below
        self.source = source
        self.steps = StepAccumulator(history_steps)
        self.rolling = RollingWindow()  # the window's step times, breakdown and ranges, kept as it moves
        self.step_log = StepLog()  # every step's times, further back: what a capture window cost (capture/cost.py)
        self.longest_ns = 0  # the longest step so far, the job's warm-up left out
        # the start of the job's first step, once seen (0: attached later, no cut): hot lines count from it
        self.first_step_t0: int | None = None
        self._source_id: int | None = None  # the name id of the "step.source" gauge, once seen
        self._uncounted_id: int | None = None  # ... and of "step.uncounted" (core.Probe._mark_source)
        self._stacks_asked = 0  # the last stacks request this view made
        self.timeline = False  # keep every step for take_steps() (recordings)
        self._pending: list = []  # completed StepRecords not yet taken
        self._skipped = 0
        # the newest steps' times (ms), worked out as they complete: a step's ends come in its one
        # STEP record, so its time never changes after (each cycle's 120 roundings were ~70 us)
        self._recent_ms: deque[float] = deque(maxlen=min(RECENT_STEPS, history_steps))

    def poll(self) -> int:
        """Drain what is new, in parts of DRAIN_PART records (up to a ring's worth: the rest waits
        for the next poll); returns the number of records read. Raises ChannelError when the
        segment became unreadable."""
        before, reader = self.source.records_read, self.source.reader
        if not self.timeline and before == 0 and SKIM_ABOVE < reader.behind <= SKIM_MAX:
            self._fold_older(self.source.skim(self.steps.completed.maxlen or 0, SKIM_KINDS))
        for _ in range(reader.info.ring_records // DRAIN_PART + 1):
            self._fold(self.source.poll(DRAIN_PART))
            if not reader.behind:
                break
        return self.source.records_read - before

    def _fold_older(self, batch: Batch) -> None:
        """What a skim kept of the steps older than those the view keeps: their ends, and what is
        not about a step."""
        self._step_ends([r for r in batch.records if r[F_KIND] == STEP])
        self.steps.add([r for r in batch.records if r[F_KIND] != STEP])

    def _fold(self, batch: Batch) -> None:
        self._step_ends([r for r in batch.records if r[F_KIND] == STEP])
        for chunk in _chunks(batch.records) if self.timeline else (batch.records,):
            done = self.steps.add(chunk)
            if done:
                new = list(self.steps.completed)[-min(done, RECENT_STEPS):]
                self._recent_ms.extend(round(s.duration_ns / 1e6, 3) for s in new)
            if done and self.timeline:
                self._pending.extend(list(self.steps.completed)[-done:])
        if len(self._pending) > TIMELINE_MAX_PENDING:
            drop = len(self._pending) - TIMELINE_MAX_PENDING
            self._skipped += drop
            del self._pending[:drop]

    def _step_ends(self, ends: list[tuple]) -> None:
        """STEP records, oldest first: the start of the job's first step, the longest step (from the
        records: a part can hold more steps than the view keeps), the step log."""
        if ends and self.first_step_t0 is None:  # the oldest step the ring still held: the job's first, or not
            self.first_step_t0 = ends[0][F_T0] if ends[0][F_STEP] <= 1 else 0  # (attached later: no setup to cut)
        for r in ends:
            if r[F_STEP] > T.STALL_WARMUP_STEPS.value and r[F_T1] - r[F_T0] > self.longest_ns:
                self.longest_ns = r[F_T1] - r[F_T0]
        self.step_log.add(ends)

    def take_steps(self, limit: int, final: bool = False) -> ProcessSteps:
        """The steps completed since the last take, up to `limit` (the newest; the rest counted as
        skipped); the newest TIMELINE_HOLD_STEPS wait for the next take unless final (the process
        ended)."""
        r = self.source.reader
        newest = self._pending[-1].index if self._pending else 0
        cut = len(self._pending) if final else sum(1 for s in self._pending if s.index <= newest - TIMELINE_HOLD_STEPS)
        ready, self._pending = self._pending[:cut], self._pending[cut:]
        skipped, self._skipped = self._skipped + max(0, len(ready) - limit), 0
        ready = ready[-limit:] if limit else []
        name = r.name
        steps = [TimelineStep(index=s.index, t0=s.t0, t1=s.t1, phases={name(k): int(v) for k, v in s.phases.items()},
                              values={name(k): v for k, v in s.values.items()}) for s in ready]
        return ProcessSteps(pid=r.info.pid, rank=r.info.meta.rank, steps=steps, skipped=skipped)

    def _step_source(self, name: Callable[[int], str]) -> tuple[str | None, int]:
        """What counts the steps now, and the first step it counted (0: from the start)."""
        if self._source_id is None:
            self._source_id = next((k for k in self.steps.gauges if name(k) == "step.source"), None)
        if self._source_id is None:
            return None, 0
        code = int(self.steps.gauges[self._source_id])
        source = L.STEP_SOURCES[code] if 0 <= code < len(L.STEP_SOURCES) else None
        return source, self.steps.gauge_steps.get(self._source_id, 0)

    def _uncounted(self, name: Callable[[int], str]) -> int:
        """The steps numbered before the source that counts now took over that stand for no iteration
        of its (a sanity check's model calls before the first optimizer.step()): not in the count."""
        if self._uncounted_id is None:
            self._uncounted_id = next((k for k in self.steps.gauges if name(k) == "step.uncounted"), None)
        if self._uncounted_id is None:
            return 0
        return max(0, int(self.steps.gauges[self._uncounted_id]))

    def request_stacks(self) -> None:
        """Ask the probe for every thread's stack (it answers within ~0.2 s, on its own thread)."""
        ctl, view = open_control(self.source.reader.path)
        try:
            self._stacks_asked = max(self._stacks_asked, ctl.stacks_request()) + 1
            ctl.request_stacks(self._stacks_asked)
        finally:
            view.close()

    def _hot_lines(self, steps: list, state: str, end_ns: int, last: StepRecord | None,
                   name: Callable[[int], str]) -> tuple[list[HotLine], int]:
        """The hot lines of the last HOT_SPAN_S (or the window's steps, if longer), and their samples."""
        span_ns = max(HOT_SPAN_S * 1e9, (steps[-1].t1 - steps[0].t0) if steps else 0)  # (the window's, at least)
        # an ended job's lines up to its loop's last step (what ran after it, a teardown, is not the loop's)
        until = last.t1 if state != "alive" and last is not None else end_ns
        since = time.monotonic_ns() - span_ns if state == "alive" else until - span_ns
        if self.first_step_t0:  # (the job's setup before its loop is not the loop's time)
            since = max(since, self.first_step_t0)
        hot, samples = anatomy.hot_lines([h for h in self.steps.hot if since <= h[0] <= until], name, L.PHASES)
        # kept: twice the span shown and back to the window's oldest step (a window that grows, as a long
        # step ends, finds its past), not HOT_RECORDS of them (~180 B each with their numbers, scanned each cycle)
        self.steps.forget_hot(int(min(since - span_ns, steps[0].t0 if steps else since - span_ns)))
        return hot, samples

    def snapshot(self, window_steps: int = 100) -> TrainingSnapshot:
        r = self.source.reader
        info = r.info
        name = r.name
        step_source, first = self._step_source(name)
        uncounted = self._uncounted(name)
        steps = self.steps.window(window_steps, first)
        self.rolling.update(steps)
        said = self.rolling.said  # (what depends on the window's steps alone: worked out when they changed)
        window = said("anatomy", lambda: _anatomy(steps, name))
        meta = info.meta
        share = self.rolling.data_wait_share()
        state = r.process_state()
        end_ns = _end_ns(r, state)
        last = self.steps.completed[-1] if self.steps.completed else None
        hot, samples = self._hot_lines(steps, state, end_ns, last, name)
        end = r.end()
        stacks = r.stacks() if self._stacks_asked else None
        now = r.now() if state == "alive" else None
        completed = r.steps  # (read after the step in progress: a step it names that ended since is counted here)
        if now is not None and now.longest_ns > self.longest_ns:  # (the probe saw every step; the ring keeps the last)
            self.longest_ns = now.longest_ns
        return TrainingSnapshot(
            pid=info.pid,
            state=state,
            closed=r.closed,
            argv=list(meta.argv),
            argv_cut=meta.argv_cut,
            rank=meta.rank,
            world_size=meta.world_size,
            local_rank=meta.local_rank,
            capture_kind=meta.capture_kind,
            probe_hot_path=meta.hot_path,
            uptime_s=round((end_ns - info.created_ns) / 1e9, 3),
            steps=max(0, completed - uncounted),
            window_steps=len(steps),
            step_time_ms=self.rolling.step_time_ms(),
            steps_per_s=said("steps_per_s", lambda: summary.steps_per_second(steps)),
            data_wait_share=None if share is None else round(share, 4),
            breakdown=self.rolling.breakdown(name),
            ranges=self.rolling.range_table(name),
            throughput_per_s=said("throughput", lambda: summary.throughput(steps, name)),
            recent_step_ms=list(self._recent_ms),
            records=self.source.records_read,
            dropped=r.total_lost,
            corrupt=r.total_corrupt,
            phases=list(window["phases"]),
            gpu=window["gpu"],
            syncs=window["syncs"],
            comm=window["comm"],
            memory=gpu_memory.memory(self.steps.gauges, self.steps.gauge_history, name,
                                     steps[0].index if steps else 0, steps[-1].index if steps else 0),
            dataloader_workers=anatomy.dataloader_workers(self.steps.gauges, name),
            ddp_backward_ms=anatomy.ddp_backward_ms(self.steps.gauges, name),
            loop_tid=steps[-1].tid if steps else None,
            step_source=step_source,
            since_step_s=round(max(0, end_ns - last.t1) / 1e9, 3) if last is not None else None,
            longest_step_ms=round(self.longest_ns / 1e6, 3) if self.longest_ns else None,
            now=_in_progress(now, name, completed, last, uncounted),
            end=END_WORDS.get(end.kind),
            end_text=end.text,
            exit_code=r.exit_code() if state != "alive" else None,
            stacks=stacks[2][:STACKS_KEEP_BYTES] if stacks is not None else None,
            stacks_age_s=round((time.monotonic_ns() - stacks[1]) / 1e9, 1) if stacks is not None else None,
            hot_lines=hot,
            samples=samples,
            optimizer=anatomy.optimizer(self.steps.gauges, name),
            copies=window["copies"],
            data_parallel=window["data_parallel"],
            ops=anatomy.op_counts(self.steps.gauges, self.steps.gauge_steps, name),
            probe_notes=[n.removeprefix(L.NOTE_PREFIX) for k in self.steps.gauges
                         if (n := name(k)).startswith(L.NOTE_PREFIX)],
        )


def _anatomy(steps: list[StepRecord], name: Callable[[int], str]) -> dict:
    w = anatomy.Window(steps, name)
    dp = w.data_parallel()
    # (DataParallel over 2+ GPUs: the probe's events on the loop's stream see one device of several, and
    # none of the replicas' streams elsewhere: the GPU's share from them is unknown, not that reading)
    gpu = None if dp is not None and dp.devices >= 2 else w.gpu_times()
    return {"phases": w.phases(), "gpu": gpu, "syncs": w.syncs(), "comm": w.comm(), "copies": w.copies(),
            "data_parallel": dp}


def _chunks(records: list) -> list[list]:
    """records cut after every TIMELINE_CHUNK_STEPS STEP records."""
    out, start, n = [], 0, 0
    for i, r in enumerate(records):
        if r[0] == L.STEP:
            n += 1
            if n == TIMELINE_CHUNK_STEPS:
                out.append(records[start:i + 1])
                start, n = i + 1, 0
    out.append(records[start:])
    return out


def _in_progress(n: Now | None, name: Callable[[int], str], completed: int = 0,
                 last: StepRecord | None = None, uncounted: int = 0) -> StepInProgress | None:
    """The step in progress, from the probe's last word on it (None: it has said nothing yet).
    That word is up to ~0.2 s old (the control thread says it), the steps completed are the loop's
    own count: a step it names that has ended since (completed: the steps the header counts; last:
    the newest step drained) is not the step in progress. The next one is, begun at that step's end
    (when drained; else just now), with no phase open yet ("other", as at a step boundary) and no
    line known (issue 43 item 26: it named a step that had already ended). Numbered as the count is
    (uncounted: the probe's steps left out of it, those before its strongest step source)."""
    if n is None:
        return None
    t = time.monotonic_ns()

    def ago(ns: int) -> float:
        return round(max(0, t - ns) / 1e9, 3)

    if n.step <= completed:
        since = last.t1 if last is not None and last.index == completed else t
        return StepInProgress(step=max(1, completed + 1 - uncounted), phase="other", phase_s=ago(since),
                              step_s=ago(since), still_s=ago(since), age_s=ago(since),
                              collective=name(n.collective_id) if n.collective_id else None)
    return StepInProgress(step=max(1, n.step - uncounted), phase=name(n.phase_id) if n.phase_id else "other",
                          phase_s=ago(n.phase_since_ns),
                          step_s=ago(n.step_t0_ns) if n.step_t0_ns else None, still_s=ago(n.moved_ns),
                          where=n.where or None, context=n.context or None, waiting_in=n.waiting_in or None,
                          age_s=ago(n.updated_ns),
                          collective=name(n.collective_id) if n.collective_id else None)


def _end_ns(reader: SegmentReader, state: str) -> int:
    """Now, or when the process stopped: its clean exit, else its last sign of life (the probe's
    control thread beats every 0.2 s), so the uptime stops with the process."""
    now = time.monotonic_ns()
    if state == "alive":
        return now
    last = max(reader.closed_ns, reader.heartbeat_ns)
    return last if 0 < last <= now else now
