"""Where monitor data comes from: live samplers polled together on one thread, or a recording.
Both hand one Cycle per poll to the same callback, which feeds MonitorState.apply(); `tuimon
record`, `--plain`, `--once` and the TUI all take their cycles from here."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

from ..analysis import stall as loop_stall
from ..capture import nsys_session
from ..capture.client import CaptureClient, CaptureRefused
from ..capture.cost import window_cost
from ..channel import ChannelError, NoSegment, SegmentReader
from ..channel.control import KIND_MEMORY
from ..channel.paths import segment_path
from ..channel.text import count
from ..model import (
    NA,
    CaptureStatus,
    CaptureSummary,
    Cycle,
    GpuProcess,
    GpuSample,
    OutsideLines,
    ProcessSample,
    ProcRow,
    TrainingSnapshot,
    WindowCost,
)
from ..sources.channel import ChannelSource
from ..sources.nvml import DeviceSampler, target_note
from ..sources.poller import Poller
from ..sources.process import ProcessNames, ProcessSampler, host_sample
from ..sources.pyspy import FIRST_ROUND_S, OutsideSampler
from ..sources.recording import ReplaySource
from . import ranks as job_ranks
from .summaries import SummaryWorker
from .target import describe, open_channel
from .training import TrainingView

if TYPE_CHECKING:
    import subprocess

_T = TypeVar("_T")

REDISCOVER_S = 1.0  # how often to look for a channel that is not there (a /proc scan)
TIMELINE_STEPS_PER_CYCLE = 1000  # of each process, in a cycle that keeps every step (recordings)
STACKS_EVERY_S = 10.0  # while the loop is stalled, its threads' stacks are asked for this often
TAIL_BYTES, TAIL_LINES = 64 * 1024, 40  # of the output of a job tuimon started, read once it exited


class Session(Protocol):
    """What the app asks of where its cycles come from: a live session or a replay. Views go the
    other way: whoever draws or serves them (the app, --plain, the exporter) gets them from
    MonitorState, never from the session."""

    ranks_switchable: bool  # `n` can show another rank in detail (live: a recording holds one rank's)
    live: bool  # a running process behind it, whose probe can be asked (a replay has none)

    def start(self, on_cycle: Callable[[Cycle], None], on_end: Callable[[], None] | None = None) -> None:
        """Hand each cycle to on_cycle from a thread of its own; on_end when there are no more."""

    def stop(self) -> None: ...

    def request_capture(self, steps: int | None, seconds: float | None, memory: bool = False) -> str:
        """What to tell the user; raises CaptureRefused. memory: the allocator's history."""

    def next_rank(self) -> str:
        """Show the next rank in detail; what to tell the user; raises CaptureRefused."""

    def request_stacks(self) -> None:
        """Ask the probe for every thread's stack (shown from the next cycle); raises CaptureRefused."""

    def progress(self) -> str | None:
        """Where a replay is ('12/36'); None for a live session."""


class LiveSession:
    """The target's process tree, the GPUs and the target's channel (picked up whenever it
    appears), polled together; pid None watches the GPUs alone (`tuimon top`). A source that
    fails is reported in the cycle's problems, with the reason, and tried again next cycle."""

    ranks_switchable = True
    live = True

    def __init__(self, pid: int | None, interval: float = 1.0, popen: subprocess.Popen | None = None,
                 devices: DeviceSampler | None = None,
                 summaries: SummaryWorker | None = None, job_log: str | None = None, gpus: list[int] | None = None,
                 timeline: bool = False, outside: bool = False, outside_first_s: int = FIRST_ROUND_S):
        """job_log: where the output of a job tuimon launched goes (its last lines are shown when it
        exits); gpus: only these GPU indices (None: all); timeline: each cycle carries every
        process's steps since the last one (Cycle.steps: what `tuimon record` keeps); outside: while
        the process shows no channel, sample its main thread from outside (py-spy: `attach` to a job
        started without the probe); outside_first_s: its first round's seconds (the screen's by default;
        `attach --once` asks for its --window)."""
        self.pid, self.interval, self.timeline = pid, interval, timeline
        self.job_log, self.only_gpus = job_log, gpus
        self._job_tail: list[str] | None = None
        self.names = ProcessNames()
        self.procs = ProcessSampler(pid, popen) if pid else None
        self._gpus = devices
        self.summaries = summaries or SummaryWorker()
        self.training: TrainingView | None = None
        self.channel: str | NA | None = NA("not looked for yet") if pid else None
        self.shown_why: str | None = None
        self.captures: CaptureClient | nsys_session.SessionWindows | None = None  # (the latter: `run --nsys`)
        self._looked_at = 0.0
        self._unreadable: str | None = None  # why the channel found at the last look could not be read
        self._poller: Poller | None = None
        self.ranks: job_ranks.RankSet | None = None  # every rank of a multi-process job
        self._want_rank: int | None = None  # the rank the UI asked to see in detail
        self._stacks_at = 0.0  # when the stalled loop's stacks were last asked for
        self._costs: dict[tuple[int, int], WindowCost] = {}  # (pid, capture seq) -> its WindowCost, once known
        self.outside, self.outside_first_s = outside, outside_first_s
        self._outside: OutsideSampler | None = None

    @property
    def gpus(self) -> DeviceSampler:
        """NVML, opened by the first poll (on the sampler thread: nvmlInit and the per-GPU
        queries take a while, and the first frame does not wait for them)."""
        if self._gpus is None:
            self._gpus = DeviceSampler()
        return self._gpus

    # -- one cycle --------------------------------------------------------------------------------

    def poll(self) -> Cycle:
        t = time.monotonic_ns()
        problems: dict[str, str] = {}
        process = gpus = training = capture = note = None
        pids: set[int] = set()
        if self.procs is not None:
            process = _guard(problems, "process", self.procs.sample)
            if process is not None:
                pids = {r.pid for r in process.procs} or {self.procs.pid}
        self.gpus.target_pids = pids
        if self.gpus.error:
            problems["gpu"] = self.gpus.error
        else:
            gpus = _guard(problems, "gpu", self.gpus.sample)
            if gpus is not None and self.only_gpus is not None:
                missing = sorted(set(self.only_gpus) - {g.index for g in gpus})
                if missing:  # (asked with --gpus: say so, not "no GPU")
                    problems["gpu"] = (f"no GPU {', '.join(map(str, missing))} here: NVML sees "
                                       f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} (indices 0 to {len(gpus) - 1})")
                gpus = [g for g in gpus if g.index in self.only_gpus]
            if gpus is not None:
                gpus = [self._named(g) for g in gpus]
            note = target_note(gpus or [], pids) if pids else None
        host = _guard(problems, "host", host_sample)
        view = self._view(problems, pids if process is not None else None)
        if view is not None:
            try:
                view.poll()
                training = view.snapshot()
                self._ask_stacks_if_stalled(view, training, process)
            except ChannelError as e:  # truncated, overwritten: say so, keep what was read, reopen
                problems["channel"] = f"{e} (showing the last numbers read; reopening)"
                self._drop_channel()
            if training is not None and self.ranks is not None:
                view, training = self._detail_rank(view, training)
            if training is not None and training.probe_notes:  # (the probe's own failures: never in the job's stderr)
                problems["probe"] = "; ".join(training.probe_notes)
            if training is not None:
                capture = self._capture(view, problems)
                if self.procs is not None and training.pid == self.pid:
                    # its CPU is read from the next cycle on; before the first step, the main thread's
                    # (the probe's loop thread until a step says otherwise: tid = pid)
                    self.procs.follow_loop(training.loop_tid if training.loop_tid is not None else training.pid)
        outside = self._outside_lines(view, process)
        if outside is not None and outside.state == "failed":
            problems["py-spy"] = outside.why
        rows = []
        snaps = {training.pid: training} if training is not None else {}
        ranks = self.ranks
        if ranks is not None and view is not None:
            snaps = _guard(problems, "ranks", lambda: ranks.poll(view, training)) or {}
            rows = job_ranks.rows(snaps, gpus, set(ranks.exited_at))
        if process is not None and training is not None:  # mark the training process (and the ranks) in the tree
            rank_of = self.ranks.rank_of_pid() if self.ranks is not None else {}
            process = replace(process, procs=[_marked(r, r.pid == training.pid, rank_of.get(r.pid)) for r in process.procs])
        steps = self._steps(view, snaps) if self.timeline and view is not None else []
        return Cycle(t=t, process=process, gpus=gpus, training=training, capture=capture,
                     channel=self.channel, shown_why=self.shown_why,
                     shown_pid=view.source.reader.info.pid if view is not None and self.shown_why else None,
                     problems=problems, gpu_note=note, host=host,
                     job_log=self.job_log, job_tail=self._tail(process), ranks=rows, steps=steps,
                     outside=outside)

    def _steps(self, shown: TrainingView, snaps: dict) -> list:
        """Every process's steps since the last cycle (the last of a process that ended, too)."""
        views = list(self.ranks.views.items()) if self.ranks is not None else [(shown.source.reader.info.pid, shown)]
        out = []
        for pid, view in views:
            snap = snaps.get(pid)
            taken = view.take_steps(TIMELINE_STEPS_PER_CYCLE, final=snap is None or snap.state != "alive")
            if taken.steps or taken.skipped:
                out.append(taken)
        return out

    def _outside_lines(self, view: TrainingView | None, process: ProcessSample | None) -> OutsideLines | None:
        """No channel: the main thread's lines, sampled from outside (a sampler of its own, started at
        the first cycle without a channel, stopped once one is shown: the probe samples its own loop)."""
        if view is not None or not self.outside or not self.pid:
            if self._outside is not None:
                self._outside.stop()
                self._outside = None
            return None
        if self._outside is None:
            if process is None or not process.alive:
                return None  # (gone: what its channel left, if anything, is all there is)
            self._outside = OutsideSampler(self.pid, first_round_s=self.outside_first_s).start()
            if self.procs is not None:
                self.procs.follow_loop(self.pid)  # (the main thread's CPU, from the next cycle on)
        return self._outside.latest()

    def _ask_stacks_if_stalled(self, view: TrainingView, training: TrainingSnapshot,
                               process: ProcessSample | None) -> None:
        """A stalled loop: ask its probe for every thread's stack (answered by the next cycle), again
        every STACKS_EVERY_S while it stays stalled."""
        check = loop_stall.check(training, process)
        if check is None or not check.stalled or time.monotonic() - self._stacks_at < STACKS_EVERY_S:
            return
        self._stacks_at = time.monotonic()
        try:
            view.request_stacks()
        except (ChannelError, OSError):
            pass  # (its segment went away: the next poll says so)

    # -- the ranks of a multi-process job -------------------------------------------------------------

    def next_rank(self) -> str:
        """(from the UI thread) Show the next rank in detail, from the next cycle on."""
        if self.ranks is None:
            raise CaptureRefused("one process: no other rank to show")
        ranks = self.ranks.ranks()
        shown = self.training.source.reader.info.meta.rank if self.training is not None else None
        want = self._want_rank if self._want_rank is not None else shown
        later = [r for r in ranks if want is None or r > want]
        self._want_rank = later[0] if later else ranks[0]
        return f"showing rank {self._want_rank} from the next sample"

    def _detail_rank(self, view: TrainingView, training: TrainingSnapshot) -> tuple[TrainingView, TrainingSnapshot]:
        """Switch the detail to the rank asked for, or to the new process of the shown rank when
        it restarted; returns the view and snapshot to show."""
        ranks = self.ranks
        if ranks is None:  # (one process: nothing to switch to)
            return view, training
        want = self._want_rank if self._want_rank is not None else training.rank
        other = ranks.view_of_rank(want) if want is not None else None
        if other is None or other is view:
            return view, training
        self.training = other
        if self.captures is not None:
            self.captures.close()
            self.captures = None  # (a window goes to the rank shown)
        self.channel = other.source.reader.path
        pid = other.source.reader.info.pid  # (the job's root: the launcher, whichever PID was asked for)
        self.shown_why = None if pid == self.pid else f"rank {want} of the job under PID {ranks.root}: {describe(pid)}"
        other.poll()
        return other, other.snapshot()

    def _named(self, g: GpuSample) -> GpuSample:
        """The GPU's processes with their names, users and commands."""
        if not isinstance(g.processes, list) or not g.processes:
            return g
        return replace(g, processes=[self._described(p) for p in g.processes])

    def _described(self, p: GpuProcess) -> GpuProcess:
        name, user, command = self.names.describe(p.pid)
        return replace(p, name=name, user=user, command=command)

    def _tail(self, process: ProcessSample | None) -> list[str]:
        """The last lines of the job's output, read once it has exited."""
        if self.job_log is None or process is None or process.alive:
            return []
        if self._job_tail is None:
            try:
                with open(self.job_log, "rb") as f:
                    f.seek(0, 2)
                    f.seek(max(0, f.tell() - TAIL_BYTES))
                    lines = f.read().decode("utf-8", "replace").splitlines()
                self._job_tail = lines[-TAIL_LINES:]
            except OSError as e:
                self._job_tail = [f"(cannot read {self.job_log}: {e.strerror})"]
        return self._job_tail

    def _view(self, problems: dict, pids: set[int] | None = None) -> TrainingView | None:
        """pids: the process tree this cycle's process sample found, if it found one."""
        if self.training is not None and self.pid and self._shows_a_launcher(self.training):
            self._look_for_ranks(self.pid, pids)
        if self.training is not None or not self.pid:
            return self.training
        now = time.monotonic()
        if now - self._looked_at < REDISCOVER_S and self._looked_at:
            if self._unreadable:
                problems["channel"] = self._unreadable  # still so, as of the last look
            return None
        self._looked_at = now
        self._unreadable = None
        try:
            reader, why = open_channel(self.pid)
        except NoSegment as e:
            self.channel = NA(str(e))
            return None
        except ChannelError as e:  # there is one, but it cannot be read: that is a problem
            self.channel = NA(str(e))
            problems["channel"] = self._unreadable = str(e)
            return None
        return self._show(self.pid, reader, why)

    def _show(self, pid: int, reader: SegmentReader, why: str | None) -> TrainingView:
        """pid: the process asked for (self.pid); reader: its channel, or one of its ranks'."""
        self.training = TrainingView(ChannelSource(reader))
        self.training.timeline = self.timeline
        self.channel, self.shown_why = reader.path, why
        root = job_ranks.job_root(pid, reader)
        if root is not None:
            self.ranks = job_ranks.RankSet(root, self.training, self.timeline)
        return self.training

    def _shows_a_launcher(self, shown: TrainingView) -> bool:
        """The channel shown is the asked process's own and has no rank: a launcher (torchrun) whose
        ranks may not have started when it was found, or a job of one process."""
        info = shown.source.reader.info
        return self.ranks is None and info.pid == self.pid and info.meta.rank is None

    def _look_for_ranks(self, pid: int, pids: set[int] | None) -> None:
        """Every REDISCOVER_S: once a ranked descendant has a channel, show it (rank 0) instead.
        pids: the tree as sampled this cycle; while none of them has a channel, nothing to open (a
        job of one process, its DataLoader workers: the look walked the tree and /dev/shm again); pid:
        the process asked for (self.pid)."""
        now = time.monotonic()
        if now - self._looked_at < REDISCOVER_S:
            return
        self._looked_at = now
        if pids is not None and not any(os.path.exists(segment_path(p)) for p in pids - {pid}):
            return
        try:
            reader, why = open_channel(pid)
        except ChannelError:
            return
        if why is None:  # still its own channel
            reader.close()
            return
        self._drop_channel()
        self._looked_at = now
        self._show(pid, reader, why)

    def _drop_channel(self) -> None:
        if self.ranks is not None:
            self.ranks.close(keep=self.training)
            self.ranks = None
        if self.training is not None:
            try:
                self.training.source.reader.close()
            except OSError:
                pass
        if self.captures is not None:
            self.captures.close()
        self.training = self.captures = None
        self._looked_at = 0.0

    def _capture(self, shown: TrainingView, problems: dict) -> CaptureStatus | None:
        """The capture state of the shown process (self.training); a done capture carries its
        summary once the worker has made it."""
        try:
            if self.captures is None:
                reader = shown.source.reader
                info = reader.info
                self.captures = nsys_session.for_job(info, lambda: reader.steps) or \
                    CaptureClient(info.path, info.pid, info.start_ticks)
            status = self.captures.status()
        except (ChannelError, CaptureRefused) as e:
            problems["capture"] = str(e)
            return None
        if status.state == "done":
            status = replace(_with_summary(status, self.summaries.summary(status)), cost=self._cost(shown, status))
        return status

    def _cost(self, shown: TrainingView, status: CaptureStatus) -> WindowCost | None:
        """What the done window cost the job, from the shown process's own step times (None until
        the steps just past its end are in)."""
        key = (shown.source.reader.info.pid, status.seq)
        cost = self._costs.get(key)
        if cost is None:
            cost = window_cost(shown.step_log.steps, status.first_step, status.last_step, status.updated_ns)
            if cost is not None:
                self._costs[key] = cost
        return cost

    # -- from the UI thread ---------------------------------------------------------------------

    def request_stacks(self) -> None:
        """Ask the shown process's probe for every thread's stack (shown from the next cycle)."""
        view = self.training
        if view is None:
            raise CaptureRefused(self.channel.reason if isinstance(self.channel, NA) else "no channel to the process yet")
        view.request_stacks()

    def request_capture(self, steps: int | None, seconds: float | None, memory: bool = False) -> str:
        """A few bytes into the control block. Returns what to tell the user."""
        if self.captures is None:
            raise CaptureRefused(self.channel.reason if isinstance(self.channel, NA) else "no channel to the process yet")
        if memory and isinstance(self.captures, nsys_session.SessionWindows):
            raise CaptureRefused("this job's windows are its nsys session's here: `tuimon capture PID --memory` asks "
                                 "its probe for a memory window")
        seq = self.captures.request(steps=steps, seconds=seconds, kind=KIND_MEMORY if memory else 0)
        return f"{'memory ' if memory else ''}capture {seq} asked: {count(steps, 'step') if steps else f'{seconds:g} s'}"

    # -- lifetime ---------------------------------------------------------------------------------

    def start(self, on_cycle: Callable[[Cycle], None], on_end: Callable[[], None] | None = None) -> None:
        """(on_end: never called; a live session goes on until stopped)"""
        def failed(message: str) -> None:  # a bug in a sampler: say so rather than freeze
            on_cycle(Cycle(t=time.monotonic_ns(), problems={"sampler": message}))

        # (Poller is not generic: it hands on_result what self.poll returns, a Cycle)
        deliver = cast(Callable[[object], None], on_cycle)
        self._poller = Poller(self.poll, deliver, self.interval, name="tuimon-sampler", on_error=failed).start()

    def progress(self) -> str | None:
        return None

    def stop(self) -> None:
        if self._poller:
            self._poller.stop()
        if self._outside is not None:
            self._outside.stop()
        if self.captures is not None:
            self.captures.close()  # (an nsys window still collecting is stopped)
        self.summaries.stop()
        if self._gpus is not None:
            self._gpus.close()


def _guard(problems: dict, source: str, fn: Callable[[], _T]) -> _T | None:
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - one source's bug is reported, the others go on
        problems[source] = f"{type(e).__name__}: {e}"
        return None


class EarlyStart:
    """A session started before whoever draws its cycles is ready (the TUI's imports and first
    compose take longer than a first poll, NVML's start among it): cycles are kept until
    take_over() names where they go, then handed straight on. Stops the session if nobody took it."""

    def __init__(self, session: Session):
        self.session = session
        self._lock = threading.Lock()
        self._kept: list[Cycle] = []
        self._on_cycle: Callable[[Cycle], None] | None = None
        self._on_end: Callable[[], None] | None = None
        session.start(self._cycle, on_end=self._end)

    def _cycle(self, c: Cycle) -> None:
        with self._lock:
            to = self._on_cycle
            if to is None:
                self._kept.append(c)
                return
        to(c)

    def _end(self) -> None:
        with self._lock:
            to = self._on_end
        if to is not None:
            to()

    def take_over(self, on_cycle: Callable[[Cycle], None], on_end: Callable[[], None] | None = None) -> list[Cycle]:
        """From now on cycles go to on_cycle, and the end to on_end (an end that came already is
        not repeated: the caller draws after applying); returns the cycles kept so far, oldest
        first, for the caller to apply itself."""
        with self._lock:
            self._on_cycle, self._on_end = on_cycle, on_end
            kept, self._kept = self._kept, []
            return kept

    def stop_unless_taken(self) -> None:
        with self._lock:
            taken = self._on_cycle is not None
        if not taken:
            self.session.stop()


def _marked(row: ProcRow, loop: bool, rank: int | None) -> ProcRow:
    """The row with loop and rank as given: a copy only where they change it (a copy of a frozen
    record is ~5 us, and most rows are no rank's, not the loop's)."""
    return row if row.loop == loop and row.rank == rank else replace(row, loop=loop, rank=rank)


def _with_summary(status: CaptureStatus, summary: CaptureSummary) -> CaptureStatus:
    return replace(status, summary=summary)


class ReplaySession:
    """A recording, paced as recorded (speed > 1: faster). total/skipped: its cycle count and
    unreadable lines, when the caller counted them first."""

    ranks_switchable = False  # a recording holds the detail of the rank it showed
    live = False  # (no process: the stacks shown are the ones it recorded)

    def __init__(self, path: str, speed: float = 1.0, total: int | None = None, skipped: int = 0):
        self.source = ReplaySource(path, speed)
        self.recording = self.source.recording
        self.total, self.skipped = total, skipped
        self.played = 0
        self.finished = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def progress(self) -> str | None:
        """Where the replay is: '12/36', 'end, 36 cycles', and the lines it skipped."""
        where = f"end, {self.played} cycle{'s' if self.played != 1 else ''}" if self.finished else (
            f"{self.played}/{self.total}" if self.total else f"{self.played}")
        skipped = self.skipped or self.recording.skipped
        return where + (f" · {skipped} bad line{'s' if skipped != 1 else ''} skipped" if skipped else "")

    def start(self, on_cycle: Callable[[Cycle], None], on_end: Callable[[], None] | None = None) -> None:
        def played(c: Cycle) -> None:
            self.played += 1
            on_cycle(c)

        def run() -> None:
            self.source.run(played, self._stop)
            self.finished = True
            if on_end is not None and not self._stop.is_set():
                on_end()

        self._thread = threading.Thread(target=run, name="tuimon-replay", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def request_capture(self, steps: int | None, seconds: float | None, memory: bool = False) -> str:
        raise CaptureRefused("a replay has no process to capture")

    def next_rank(self) -> str:
        raise CaptureRefused("a replay shows the rank it recorded")

    def request_stacks(self) -> None:
        raise CaptureRefused("a replay has no process to ask: the stacks shown are the ones it recorded")


def run_cycles(session: LiveSession, interval: float, on_cycle: Callable[[Cycle], object],
               until: Callable[[Cycle], object] | None = None, seconds: float = 0) -> int:
    """Poll on this thread every interval, handing each cycle to on_cycle, until until(cycle) is
    true, `seconds` have passed (0: no limit) or Ctrl-C. Returns the number of cycles."""
    n = 0
    end = time.monotonic() + seconds if seconds > 0 else None
    next_at = time.monotonic()
    try:
        while True:
            c = session.poll()
            n += 1
            on_cycle(c)
            if (until is not None and until(c)) or (end is not None and time.monotonic() >= end):
                return n
            next_at = max(next_at + interval, time.monotonic())
            time.sleep(max(0.0, min(next_at, end or next_at) - time.monotonic()))
    except KeyboardInterrupt:
        return n
