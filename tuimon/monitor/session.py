"""Where monitor data comes from: live samplers polled together on one thread, or a recording.
Both hand one Cycle per poll to the same callback, which feeds MonitorState.apply(); `tuimon
record`, `--plain`, `--once` and the TUI all take their cycles from here."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

from ..capture.client import CaptureRefused
from ..capture.kineto_ranks import RankJob
from ..channel import ChannelError
from ..model import (
    CaptureStatus,
    Cycle,
    GpuProcess,
    GpuSample,
    ProcessSample,
    ProcRow,
    TrainingSnapshot,
)
from ..sources.nvml import DeviceSampler, target_note
from ..sources.poller import Poller
from ..sources.process import ProcessNames, ProcessSampler, host_sample
from ..sources.pyspy import FIRST_ROUND_S
from ..sources.recording import ReplaySource
from . import ranks as job_ranks
from .captures import Captures
from .channel_finder import ChannelFinder
from .job_log import JobLog
from .outside import OutsideWatch
from .stalls import StallWatch
from .summaries import SummaryWorker
from .training import TrainingView

if TYPE_CHECKING:
    import subprocess

_T = TypeVar("_T")

TIMELINE_STEPS_PER_CYCLE = 1000  # of each process, in a cycle that keeps every step (recordings)


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
    fails is reported in the cycle's problems, with the reason, and tried again next cycle.
    Its parts, one job each: the channel shown and the job's ranks (`finder`), the shown process's
    capture windows (`captures`), the stalled loop's stacks (`stalls`), the lines from outside
    (`outside`) and the launched job's output (`log`); the session samples and puts the cycle together."""

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
        self.only_gpus = gpus
        self.names = ProcessNames()
        self.procs = ProcessSampler(pid, popen) if pid else None
        self._gpus = devices
        self.captures = Captures(summaries)
        self.finder = ChannelFinder(pid, timeline, on_change=self.captures.close)
        self.captures.ranks = self._rank_jobs  # (`c` on a torchrun job: Kineto's window on every rank)
        self.stalls = StallWatch()
        self.outside = OutsideWatch(pid if outside else None, outside_first_s,
                                    on_start=self.procs.follow_loop if self.procs is not None else None)
        self.log = JobLog(job_log)
        self._poller: Poller | None = None

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
        process = _guard(problems, "process", self.procs.sample) if self.procs is not None else None
        pids: set[int] = set()
        if process is not None and self.procs is not None:
            pids = {r.pid for r in process.procs} or {self.procs.pid}
        gpus, note = self._gpu_samples(problems, pids)
        host = _guard(problems, "host", host_sample)
        view, training, capture = self._training(problems, process, pids if process is not None else None)
        outside = self.outside.lines(view is not None, process)
        if outside is not None and outside.state == "failed":
            problems["py-spy"] = outside.why
        rows = []
        snaps = {training.pid: training} if training is not None else {}
        ranks = self.finder.ranks
        if ranks is not None and view is not None:
            snaps = _guard(problems, "ranks", lambda: ranks.poll(view, training)) or {}
            rows = job_ranks.rows(snaps, gpus, set(ranks.exited_at))
        if process is not None and training is not None:  # mark the training process (and the ranks) in the tree
            rank_of = ranks.rank_of_pid() if ranks is not None else {}
            process = replace(process, procs=[_marked(r, r.pid == training.pid, rank_of.get(r.pid)) for r in process.procs])
        steps = self._steps(view, snaps) if self.timeline and view is not None else []
        shown_why = self.finder.shown_why
        return Cycle(t=t, process=process, gpus=gpus, training=training, capture=capture,
                     channel=self.finder.channel, shown_why=shown_why,
                     shown_pid=view.source.reader.info.pid if view is not None and shown_why else None,
                     problems=problems, gpu_note=note, host=host,
                     job_log=self.log.path, job_tail=self.log.tail(process), ranks=rows, steps=steps,
                     outside=outside)

    def _rank_jobs(self) -> list[RankJob]:
        """The ranks the session follows (none for a job of one process), for a window on every rank."""
        ranks = self.finder.ranks
        return ranks.jobs() if ranks is not None else []

    def _gpu_samples(self, problems: dict, pids: set[int]) -> tuple[list[GpuSample] | None, str | None]:
        """Every GPU (or the ones asked for), its processes named, and the note on where the
        target's processes are (pids: the target's tree; empty: no target)."""
        self.gpus.target_pids = pids
        if self.gpus.error:
            problems["gpu"] = self.gpus.error
            return None, None
        gpus = _guard(problems, "gpu", self.gpus.sample)
        if gpus is not None and self.only_gpus is not None:
            missing = sorted(set(self.only_gpus) - {g.index for g in gpus})
            if missing:  # (asked with --gpus: say so, not "no GPU")
                problems["gpu"] = (f"no GPU {', '.join(map(str, missing))} here: NVML sees "
                                   f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} (indices 0 to {len(gpus) - 1})")
            gpus = [g for g in gpus if g.index in self.only_gpus]
        if gpus is not None:
            gpus = [self._named(g) for g in gpus]
        return gpus, target_note(gpus or [], pids) if pids else None

    def _training(self, problems: dict, process: ProcessSample | None, pids: set[int] | None
                  ) -> tuple[TrainingView | None, TrainingSnapshot | None, CaptureStatus | None]:
        """The channel shown (the rank asked for, once the job has ranks), drained: its view (the
        one drained, even when its channel broke and was dropped), its snapshot and its capture
        state. pids: the process tree this cycle's process sample found, if it found one."""
        view = self.finder.view(problems, pids)
        if view is None:
            return None, None, None
        training = capture = None
        try:
            view.poll()
            training = view.snapshot()
            self.stalls.check(view, training, process)
        except ChannelError as e:  # truncated, overwritten: say so, keep what was read, reopen
            problems["channel"] = f"{e} (showing the last numbers read; reopening)"
            self.finder.drop()
        if training is not None and self.finder.ranks is not None:
            view, training = self.finder.detail(view, training)
        if training is not None and training.probe_notes:  # (the probe's own failures: never in the job's stderr)
            problems["probe"] = "; ".join(training.probe_notes)
        if training is not None:
            capture = self.captures.status(view, problems, training.step_source)
            if self.procs is not None and training.pid == self.pid:
                # its CPU is read from the next cycle on; before the first step, the main thread's
                # (the probe's loop thread until a step says otherwise: tid = pid)
                self.procs.follow_loop(training.loop_tid if training.loop_tid is not None else training.pid)
        return view, training, capture

    def _steps(self, shown: TrainingView, snaps: dict) -> list:
        """Every process's steps since the last cycle (the last of a process that ended, too)."""
        ranks = self.finder.ranks
        views = list(ranks.views.items()) if ranks is not None else [(shown.source.reader.info.pid, shown)]
        out = []
        for pid, view in views:
            snap = snaps.get(pid)
            taken = view.take_steps(TIMELINE_STEPS_PER_CYCLE, final=snap is None or snap.state != "alive")
            if taken.steps or taken.skipped:
                out.append(taken)
        return out

    def _named(self, g: GpuSample) -> GpuSample:
        """The GPU's processes with their names, users and commands."""
        if not isinstance(g.processes, list) or not g.processes:
            return g
        return replace(g, processes=[self._described(p) for p in g.processes])

    def _described(self, p: GpuProcess) -> GpuProcess:
        name, user, command = self.names.describe(p.pid)
        return replace(p, name=name, user=user, command=command)

    # -- from the UI thread ---------------------------------------------------------------------

    def next_rank(self) -> str:
        """(from the UI thread) Show the next rank in detail, from the next cycle on."""
        return self.finder.next_rank()

    def request_stacks(self) -> None:
        """Ask the shown process's probe for every thread's stack (shown from the next cycle)."""
        view = self.finder.training
        if view is None:
            raise CaptureRefused(self.finder.why_none())
        view.request_stacks()

    def request_capture(self, steps: int | None, seconds: float | None, memory: bool = False) -> str:
        """A few bytes into the control block. Returns what to tell the user."""
        return self.captures.request(steps, seconds, memory, self.finder.why_none())

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
        self.outside.stop()
        self.captures.stop()  # (an nsys window still collecting is stopped)
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
