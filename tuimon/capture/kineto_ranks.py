"""`c` on a torchrun job through Kineto's on-demand path (issue 41): a window on every rank over the
same steps. One endpoint serves every process of the host that registers (kineto_daemon.py), so
each rank is handed its own config, and every config names the same span of the host's wall clock:
Kineto's synchronized start (PROFILE_START_TIME, Unix ms) and a duration (ACTIVITIES_DURATION_MSECS).

Why one span of the clock lines the ranks up: DDP's ranks step in lockstep (every step's gradients
are all-reduced), so the steps that begin within one span of the host's clock are the same steps on
every rank, but for a step whose boundary lies within the few ms the ranks' boundaries lie apart of
an edge (one step more or less there); Kineto's profiler thread on each rank sleeps until the start
and traces until the end on that clock. (Kineto's iteration count is no common ground: torch counts a step only once
libkineto's profiler is initialized, which happens on each rank at a time of its own, so the ranks'
counts may differ at the same step.)

The start lies past what a config may take to be active on the last rank (plan()): each rank asks
the endpoint on its own 5 s clock (POLL_S); Kineto's profiler thread, ticking every 1 s, looks at
the config at its first tick within 1 s of start - warm-up and refuses it when less than the
warm-up is left (kineto_daemon.trace_config). The duration: the steps asked for at the slowest
rank's typical step time, MIN_DURATION_MS at least.

Which steps each rank's trace holds is read afterwards from that rank's own step records: the steps
whose start lies in the window (taken to the probes' CLOCK_MONOTONIC once, the two clocks read
together), said per rank, with whether the ranks' steps agree; the window's steps are the shown
rank's. A rank whose records do not reach past the window, or that wrote no trace, is said as such:
no steps are claimed for it.

Same interface as the other window clients (capture/backends.py WindowClient). The trace of each
rank lands beside the others' (kineto_daemon.trace_file: one per PID); the window's path is rank 0's
(the lowest rank that wrote one), whose summary is shown; the others' files are listed in its
message (`files`: rank -> path). A rank that does not ask the endpoint, or does not take its config
before the start, is named; the window goes on for the others."""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..channel import ChannelError, SegmentReader, find_segments
from ..channel.control import MAX_SECONDS
from ..channel.paths import safe_file_part
from ..channel.text import count
from . import kineto_windows
from .client import CaptureRefused, check_free_space, check_request
from .cost import StepLog
from .kineto_daemon import POLL_S, EndpointTaken, KinetoEndpoint, trace_file

KINETO_TICK_S = 1.0  # Kineto's profiler thread looks at a waiting config this often (Config::kControllerIntervalMsecs)
# On top of POLL_S, before the last rank's Kineto looks at its config: its tick, and half a second for
# the datagram's trip and a loaded host.
POLL_MARGIN_S = KINETO_TICK_S + 0.5
# ACTIVITIES_WARMUP_PERIOD_SECS (whole seconds): how long before the start Kineto takes up the config
# and sets up its activity buffers (its default: 5 s).
WARMUP_S = 1
MIN_DURATION_MS = 100  # a window this long at least: a few ms off at an edge is then a small part of it
UNKNOWN_STEP_MS = 1000.0  # the step time assumed when no rank's is known yet
MAX_DURATION_MS = int(MAX_SECONDS * 1000)
STEPS_WAIT_S = 30.0  # after the window's end, for every rank's step records to pass it
OTHERS_WAIT_S = 30.0  # after the first rank's trace, for the others' (each written on its own Kineto's threads)
TYPICAL_OF = 50  # a rank's typical step: the median of its last 50
RANKS_EVERY_S = 0.5  # how often a window reads the ranks' records while it waits


@dataclass(frozen=True)
class RankJob:
    """One rank as the monitor sees it: its PID, the optimizer steps its probe counted (None: not
    known: counted otherwise, or none yet), its typical step time (None: not known yet) and its
    last steps' records (index, t0, t1 in CLOCK_MONOTONIC ns)."""
    rank: int
    pid: int
    steps: int | None
    step_ms: float | None
    recent: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True)
class Plan:
    """Every rank's window: from start_ms (Unix ms: Kineto's PROFILE_START_TIME) for duration_ms;
    start_ns: the same start on the probes' clock (CLOCK_MONOTONIC ns); words: the plan, said to
    the person."""
    start_ms: int
    duration_ms: int
    start_ns: int
    words: str

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.duration_ms * 1_000_000


def typical_ms(steps: Iterable[tuple[int, int, int]]) -> float | None:
    """The median of the last TYPICAL_OF steps' times (index, t0, t1 in ns); None with fewer than 3."""
    times = sorted((t1 - t0) / 1e6 for _, t0, t1 in list(steps)[-TYPICAL_OF:] if t1 > t0)
    return times[len(times) // 2] if len(times) >= 3 else None


def clocks() -> tuple[int, int]:
    """(Unix ns, CLOCK_MONOTONIC ns) of one moment: the monotonic clock read on either side of the
    wall clock, the middle taken."""
    m0 = time.monotonic_ns()
    wall = time.time_ns()
    m1 = time.monotonic_ns()
    return wall, (m0 + m1) // 2


def clock_words(unix_ms: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(unix_ms // 1000)) + f".{unix_ms % 1000:03d}"


def plan(ranks: Sequence[RankJob], steps: int, poll_s: float | None = None,
         now: tuple[int, int] | None = None) -> Plan:
    """Every rank's window: from now (clocks(), or `now`) + poll_s + POLL_MARGIN_S + WARMUP_S,
    rounded up to Kineto's ms, for `steps` at the slowest rank's typical step time (UNKNOWN_STEP_MS
    when no rank's is known), MIN_DURATION_MS to MAX_DURATION_MS."""
    if not ranks:
        raise ValueError("a window on the ranks needs a rank")
    if steps < 1:
        raise ValueError("a window is of one step or more")
    poll_s = POLL_S if poll_s is None else poll_s
    known = [r.step_ms for r in ranks if r.step_ms is not None and r.step_ms > 0]
    step_ms = max(known) if known else UNKNOWN_STEP_MS
    asked_ms = math.ceil(steps * step_ms)
    duration = min(MAX_DURATION_MS, max(MIN_DURATION_MS, asked_ms))
    wall_ns, mono_ns = clocks() if now is None else now
    lead_s = poll_s + POLL_MARGIN_S + WARMUP_S
    start_ms = -(-(wall_ns + round(lead_s * 1e9)) // 1_000_000)
    start_ns = mono_ns + start_ms * 1_000_000 - wall_ns
    slowest = (f"{count(steps, 'step')} at the slowest rank's {step_ms:.3g} ms" if known else
               f"no step time known yet: {count(steps, 'step')} at {UNKNOWN_STEP_MS:g} ms assumed")
    bound = (f", {MIN_DURATION_MS} ms at least" if duration > asked_ms else
             f", {MAX_DURATION_MS // 1000} s at most" if duration < asked_ms else "")
    return Plan(start_ms, duration, start_ns,
                f"every rank from {clock_words(start_ms)} for {duration} ms ({slowest}{bound}; {lead_s:g} s ahead: "
                f"the ranks' next poll of the endpoint and Kineto's {WARMUP_S} s warm-up)")


def covered(recent: Iterable[tuple[int, int, int]], start_ns: int, end_ns: int) -> tuple[int, int] | None:
    """The first and last steps whose start lies in [start_ns, end_ns] (None: no step began there)."""
    inside = [i for i, t0, _t1 in recent if start_ns <= t0 <= end_ns]
    return (min(inside), max(inside)) if inside else None


def unknown_why(recent: Sequence[tuple[int, int, int]], start_ns: int, end_ns: int) -> str | None:
    """Why a rank's records cannot say which steps began in [start_ns, end_ns]; None when they can:
    they hold a step begun by the start and a step ended past the end (after which none begins
    before the end)."""
    if not recent or recent[0][1] > start_ns:
        return "its step records no longer reach back to the window's start"
    if max(t1 for _i, _t0, t1 in recent) < end_ns:
        return "no step of it ended past the window's end"
    return None


class KinetoRankWindows(kineto_windows.KinetoWindows):
    """Windows on every rank: ranks() says the ranks as they are now (each call reads their step
    records); pid, steps_now and alive are the shown rank's."""

    def __init__(self, endpoint: KinetoEndpoint, ranks: Callable[[], list[RankJob]], pid: int, program: str,
                 steps_now: Callable[[], int], alive: Callable[[], bool]):
        super().__init__(endpoint, pid, program, steps_now, alive)
        self.ranks = ranks
        self.files: dict[int, str] = {}  # rank -> the trace it wrote, in the last window
        self.steps: dict[int, tuple[int, int] | None] = {}  # rank -> the steps its trace holds (None: none began in it)

    def request(self, steps: int | None = None, seconds: float | None = None, kind: int = 0) -> int:
        if kind:
            raise CaptureRefused("a memory window is the probe's (`tuimon capture PID --memory`)")
        if steps is None:  # (backends.py routes windows in seconds elsewhere)
            raise CaptureRefused("a window on every rank through Kineto is one of optimizer steps")
        check_request(self.pid, self.alive(), steps, seconds)
        with self._lock:
            if self._status.busy:
                raise CaptureRefused(f"Kineto window {self._status.seq} is {self._status.state}: one at a time")
            ranks = self.ranks()
            asking = [r for r in ranks if self.endpoint.registered(r.pid)]
            missing = [r for r in ranks if r not in asking]
            if not asking:
                raise CaptureRefused("no rank of the job asks Kineto's endpoint now")
            the_plan = plan(ranks, steps)  # (every rank's step time: they step together, at the slowest's pace)
            folder = check_free_space()
            seq = self._status.seq + 1
            base = os.path.join(folder, f"{safe_file_part(self.program)}-{self.pid}-kineto{seq}-ranks-"
                                        f"{time.strftime('%Y%m%d-%H%M%S')}.json")
            asked_at = time.monotonic()
            handed: list[RankJob] = []
            for r in asking:
                try:
                    self.endpoint.request_trace(r.pid, base, duration_ms=the_plan.duration_ms,
                                                start_time_ms=the_plan.start_ms, warmup_s=WARMUP_S)
                except (KeyError, RuntimeError):
                    missing.append(r)
                    continue
                handed.append(r)
            if not handed:
                raise CaptureRefused("no rank of the job could be handed Kineto's config")
            self.files, self.steps = {}, {}
            self._set(seq=seq, state="armed", first_step=0, last_step=0, path="",
                      message=f"waits for the next poll of Kineto's endpoint by {_ranks(handed)} (within "
                              f"{POLL_S:g} s): {the_plan.words}{_missing(missing)}")
        threading.Thread(target=self._ranks_window, args=(base, handed, missing, the_plan, asked_at),
                         name="tuimon-kineto-ranks-window", daemon=True).start()
        return seq

    def _ranks_window(self, base: str, handed: list[RankJob], missing: list[RankJob], the_plan: Plan,
                      asked_at: float) -> None:
        try:
            took_at: dict[int, float] = {}  # PID -> when it took its config (monotonic s)

            def everyone() -> bool:
                took_at.update((r.pid, h) for r in handed
                               if r.pid not in took_at and (h := self.endpoint.handed(r.pid)) >= asked_at)
                return len(took_at) == len(handed)

            start_s = the_plan.start_ns / 1e9
            # Kineto refuses a config it first looks at with less than its warm-up left to the start:
            # one not taken by start - warm-up is withdrawn.
            self._until(everyone, min(kineto_windows.HAND_WAIT_S, max(0.0, start_s - WARMUP_S - time.monotonic())))
            for r in handed:
                if r.pid not in took_at:
                    self.endpoint.withdraw(r.pid)
            everyone()  # (one handed over just before its withdrawal)
            took = [r for r in handed if r.pid in took_at]
            missing = missing + [r for r in handed if r not in took]
            if not took:
                self._set(state="failed", message=f"no rank took the config before the window's start{_missing(missing)}")
                return
            # Kineto looks at a config at its next tick, up to KINETO_TICK_S after it came.
            late = [r.rank for r in took if took_at[r.pid] > start_s - WARMUP_S - KINETO_TICK_S]
            lateness = (f"; rank {', '.join(map(str, late))} took the config less than {WARMUP_S + KINETO_TICK_S:g} s "
                        "before the start: Kineto may refuse it (too little time left for its warm-up)" if late else "")
            total = len(took) + len(missing)
            self._set(state="capturing", message=f"Kineto traces {the_plan.duration_ms} ms from "
                                                 f"{clock_words(the_plan.start_ms)} on {_ranks(took)} ({len(took)} of "
                                                 f"{total}){_missing(missing)}{lateness}")
            now: dict[int, RankJob] = {}
            read_at = [0.0]

            def stepped_past() -> bool:  # (every RANKS_EVERY_S: reading the ranks also drains their records)
                if time.monotonic() - read_at[0] < RANKS_EVERY_S:
                    return False
                read_at[0] = time.monotonic()
                now.update((r.pid, r) for r in self.ranks())
                return time.monotonic_ns() > the_plan.end_ns and all(
                    r.pid in now and unknown_why(now[r.pid].recent, the_plan.start_ns, the_plan.end_ns) is None
                    for r in took)

            self._until(stepped_past, max(0.0, (the_plan.end_ns - time.monotonic_ns()) / 1e9) + STEPS_WAIT_S)
            steps: dict[int, tuple[int, int] | None] = {}
            unknown: dict[int, str] = {}
            for r in took:
                recent = now[r.pid].recent if r.pid in now else ()
                if (why := unknown_why(recent, the_plan.start_ns, the_plan.end_ns)) is not None:
                    unknown[r.rank] = why
                else:
                    steps[r.rank] = covered(recent, the_plan.start_ns, the_plan.end_ns)
            t0 = time.monotonic()
            paths = {r.rank: trace_file(base, r.pid) for r in took}
            written = lambda: {k: p for k, p in paths.items() if os.path.exists(p)}  # noqa: E731
            if not self._until(lambda: bool(written()), kineto_windows.TRACE_WAIT_S):
                self._set(state="failed", message=f"no trace from Kineto within {kineto_windows.TRACE_WAIT_S:g} s "
                                                  f"of the window's end{lateness}")
                return
            self._until(lambda: len(written()) == len(paths), OTHERS_WAIT_S)
            self.files = files = dict(sorted(written().items()))
            self.steps = {k: v for k, v in steps.items() if k in files}
            shown = min(files)
            first, last = self.steps.get(shown) or (0, 0)
            unwritten = sorted(set(paths) - set(files))
            others = "; ".join(f"rank {k}: {p}" for k, p in files.items() if k != shown)
            self._set(state="done", path=files[shown], first_step=first, last_step=last,
                      message=(f"on {count(len(files), 'rank')} of {total}, {the_plan.duration_ms} ms from "
                               f"{clock_words(the_plan.start_ms)}, written by Kineto {time.monotonic() - t0:.1f} s "
                               "after the ranks' records passed the window's end, while the job ran; "
                               + _steps_words(self.steps, {k: v for k, v in unknown.items() if k in files})
                               + f"; rank {shown}'s summary"
                               + (f"; the others' traces: {others}" if others else "")
                               + (f"; no trace from rank {', '.join(map(str, unwritten))} within {OTHERS_WAIT_S:g} s "
                                  "of the first" if unwritten else "") + _missing(missing) + lateness))
        except Exception as e:  # noqa: BLE001 - a bug here must not end the monitor
            self._set(state="failed", message=f"{type(e).__name__}: {e}"[:300])


def _steps_words(steps: dict[int, tuple[int, int] | None], unknown: dict[int, str]) -> str:
    """'steps traced (...): rank 0: 231..235, rank 1: 231..235 (the same on every rank)', and the
    ranks whose steps are not known, why."""
    def one(r: tuple[int, int] | None) -> str:
        return "none began in the window" if r is None else f"{r[0]}..{r[1]}"

    said = ", ".join(f"rank {k}: {one(v)}" for k, v in sorted(steps.items()))
    ranges = set(steps.values())
    if len(ranges) == 1 and len(steps) > 1:
        said += " (the same on every rank)"
    elif len(ranges) > 1 and None not in ranges and max(r[0] for r in ranges if r) - min(r[0] for r in ranges if r) <= 1 \
            and max(r[1] for r in ranges if r) - min(r[1] for r in ranges if r) <= 1:
        said += (" (not the same on every rank, a step apart at an edge: the ranks begin a step a few ms apart, "
                 "and one began inside the window on one rank and outside it on another)")
    elif len(ranges) > 1:
        said += " (not the same on every rank)"
    if unknown:
        said += ("; " if said else "") + "; ".join(f"rank {k}'s not known: {why}" for k, why in sorted(unknown.items()))
    return f"steps traced (those begun in the window, by each rank's step records): {said}"


def _ranks(ranks: Iterable[RankJob]) -> str:
    ids = sorted(r.rank for r in ranks)
    return f"rank{'s' if len(ids) != 1 else ''} {', '.join(map(str, ids))}"


def _missing(missing: Sequence[RankJob]) -> str:
    if not missing:
        return ""
    return f"; {_ranks(missing)} (PID {', '.join(str(r.pid) for r in missing)}) did not ask Kineto's endpoint or take its config"


def for_ranks(ranks: Callable[[], list[RankJob]], pid: int, start_ticks: int, program: str,
              steps_now: Callable[[], int], say: Callable[[str], object] | None = None) -> KinetoRankWindows | None:
    """The Kineto windows of a job's ranks, served here, once at least one rank asks this host's
    endpoint (waits up to REGISTER_WAIT_S for every rank); None (and why, through say) when none
    does. pid, start_ticks: the rank shown (kineto_windows.why_not is asked of it)."""
    from ..channel import procinfo

    why = kineto_windows.why_not(pid)
    if why is None:
        try:
            endpoint = kineto_windows.KinetoEndpoint()
        except EndpointTaken as e:
            why = str(e)
        except OSError as e:
            why = f"Kineto's endpoint cannot be opened: {e.strerror or e}"
        else:
            end = time.monotonic() + kineto_windows.REGISTER_WAIT_S
            while True:
                every = ranks()
                asking = [r for r in every if endpoint.registered(r.pid)]
                if asking and len(asking) == len(every) or time.monotonic() >= end:
                    break
                time.sleep(0.1)
            if asking:
                return KinetoRankWindows(endpoint, ranks, pid, program, steps_now,
                                         lambda: procinfo.process_state(pid, start_ticks) == "alive")
            endpoint.close()
            why = f"no rank of the job asked Kineto's endpoint within {kineto_windows.REGISTER_WAIT_S:g} s"
    if say is not None and why != "the job was not started with KINETO_USE_DAEMON=1":
        say(why)
    return None


class RankChannels:
    """The channels of a job's ranks (the ranked descendants of its root: torchrun's agent or the
    launcher asked for), for `tuimon capture`: each rank's step count, typical step time and last
    steps' records, read at each call of ranks() (from any one thread at a time: a lock)."""

    RECENT = 16384  # records read back at the first look: enough steps for a typical step time

    def __init__(self, root: int):
        self.root = root
        self._readers: dict[int, tuple[SegmentReader, StepLog]] = {}
        self._lock = threading.Lock()

    def ranks(self) -> list[RankJob]:
        with self._lock:
            self._discover()
            out = []
            for pid, (reader, log) in list(self._readers.items()):
                try:
                    log.add(reader.drain().records)
                    now, steps, rank = reader.now(), reader.steps, reader.info.meta.rank
                except ChannelError:
                    continue
                if rank is None or reader.process_state() != "alive":
                    continue
                counted = now is not None and now.source == "optimizer" and steps > 0
                out.append(RankJob(rank, pid, steps if counted else None, typical_ms(log.steps), tuple(log.steps)))
            return sorted(out, key=lambda r: (r.rank, r.pid))

    def _discover(self) -> None:
        for f in find_segments(self.root):
            if f.relation != "descendant" or f.pid in self._readers:
                continue
            try:
                reader = SegmentReader(f.path)
            except ChannelError:
                continue
            if reader.info.meta.rank is None:
                reader.close()
                continue
            reader.seek_recent(min(self.RECENT, reader.info.ring_records))
            self._readers[f.pid] = (reader, StepLog())

    def close(self) -> None:
        with self._lock:
            for reader, _log in self._readers.values():
                reader.close()
            self._readers.clear()
