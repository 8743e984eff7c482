"""`c` on a torchrun job through Kineto's on-demand path (issue 41): a window on every rank at the
same steps. One endpoint serves every process of the host that registers (kineto_daemon.py), so
each rank is handed its own config, and every config names the same absolute Kineto iteration to
start at.

Why one absolute iteration lines the ranks up: Kineto counts iterations per process from its first
optimizer step (its count is -1 until then, one more at each step's post-hook), and DDP's ranks
step in lockstep (every step's gradients are all-reduced), so every rank's count is the same at the
same step. A config waits until the count reaches PROFILE_START_ITERATION and starts there
(libkineto ActivityProfilerController::shouldActivateIterationConfig). The ranks poll the endpoint
each on its own 5 s clock, so the start must lie past the step the last of them will be at when it
takes its config: plan() says which. Without a step count for every rank (a rank counted by
something other than its optimizer, or no step time yet to know how many steps one poll interval
holds), the configs fall back to Kineto's round-up (PROFILE_START_ITERATION=0, ROUNDUP=R, R more
steps than one poll interval holds): each rank starts at the next multiple of R of its own count,
so ranks that take their configs on either side of a multiple start R steps apart, and the status
says so.

Same interface as the other window clients (capture/backends.py WindowClient). The trace of each
rank lands beside the others' (kineto_daemon.trace_file: one per PID); the window's path is rank 0's
(the lowest rank that wrote one), whose summary is shown; the others' files are listed in its
message (`files`: rank -> path). A rank that does not ask the endpoint, or does not take its config,
is named; the window goes on for the others."""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ..channel import ChannelError, SegmentReader, find_segments
from ..channel.paths import safe_file_part
from ..channel.text import count
from . import kineto_windows
from .client import CaptureRefused, check_free_space, check_request
from .cost import StepLog
from .kineto_daemon import POLL_S, EndpointTaken, KinetoEndpoint, trace_file

# How far past the poll interval the last rank's config may come, on top of POLL_S: the step counts
# are read up to one sampling cycle old (the TUI samples at 1 Hz; `tuimon capture` reads them at the
# request), the config waits for the endpoint's answer to a poll that came just before it was set,
# and the datagram's trip; 1.5 s covers a 1 s cycle with half a second to spare.
POLL_MARGIN_S = 1.5
SPARE_STEPS = 1  # and one step more: a rank's count is published at its step boundary, not mid-step
FALLBACK_ROUNDUP = 100  # R when no rank's step time is known: more steps than 5 s holds at 50 ms a step or slower
OTHERS_WAIT_S = 30.0  # after the first rank's trace, for the others' (each written on its own Kineto's threads, at the same step)
TYPICAL_OF = 50  # a rank's typical step: the median of its last 50


@dataclass(frozen=True)
class RankJob:
    """One rank as the monitor sees it: its PID, the optimizer steps its probe counted (None: not
    known: counted otherwise, or none yet) and its typical step time (None: not known yet)."""
    rank: int
    pid: int
    steps: int | None
    step_ms: float | None


@dataclass(frozen=True)
class Plan:
    """Where every rank's window starts: the absolute Kineto iteration (start_iteration, ROUNDUP 1),
    or None and Kineto's round-up R; first_step: the window's first step as the probes count them
    (0 when not known before the ranks take their configs); words: the plan, said to the person."""
    start_iteration: int | None
    roundup: int
    first_step: int
    words: str


def typical_ms(steps: Iterable[tuple[int, int, int]]) -> float | None:
    """The median of the last TYPICAL_OF steps' times (index, t0, t1 in ns); None with fewer than 3."""
    times = sorted((t1 - t0) / 1e6 for _, t0, t1 in list(steps)[-TYPICAL_OF:] if t1 > t0)
    return times[len(times) // 2] if len(times) >= 3 else None


def steps_in(seconds: float, step_ms: float) -> int:
    """How many step boundaries seconds can hold at step_ms a step, at most."""
    return math.ceil(seconds * 1000.0 / step_ms)


def roundup_for(ahead: int | None) -> int:
    """Kineto's round-up for the fallback: the smallest of 10, 20, 50, 100, 200, ... above `ahead`
    (the steps one poll interval holds), FALLBACK_ROUNDUP when not known."""
    if ahead is None:
        return FALLBACK_ROUNDUP
    r = 10
    while True:
        for m in (1, 2, 5):
            if r * m > ahead:
                return r * m
        r *= 10


def plan(ranks: Sequence[RankJob], poll_s: float | None = None) -> Plan:
    """Where every rank's window starts. With every rank's step count and a step time: K = the
    highest count + the steps the fastest rank can make before the last rank takes its config
    (poll_s + POLL_MARGIN_S, + SPARE_STEPS). A rank whose count S at its config is below K has
    Kineto's count S - 1 < K, so it starts exactly at K; each rank's count K is reached at the end of
    its optimizer step K + 1, and the window holds the steps after it: K + 2 on, as the probes count
    them (the probe's step k ends at the k-th optimizer step)."""
    if not ranks:
        raise ValueError("a window on the ranks needs a rank")
    poll_s = POLL_S if poll_s is None else poll_s
    known = [r.step_ms for r in ranks if r.step_ms is not None and r.step_ms > 0]
    ahead = steps_in(poll_s + POLL_MARGIN_S, min(known)) + SPARE_STEPS if known else None
    uncounted = [r.rank for r in ranks if r.steps is None or r.steps < 1]
    if not uncounted and ahead is not None:
        k = max(r.steps or 0 for r in ranks) + ahead
        return Plan(k, 1, k + 2, f"every rank from step {k + 2} (Kineto's iteration {k}, {count(ahead, 'step')} "
                                 f"past the furthest rank: the {poll_s + POLL_MARGIN_S:g} s its config may take)")
    r = roundup_for(ahead)
    why = (f"no optimizer step count for rank {', '.join(map(str, uncounted))}" if uncounted else
           "no step time known yet")
    return Plan(None, r, 0, f"{why}: each rank starts at the next multiple of {r} of its own steps (Kineto's "
                            f"round-up), so ranks may start {r} steps apart")


class KinetoRankWindows(kineto_windows.KinetoWindows):
    """Windows on every rank: ranks() says the ranks as they are now (each call reads their step
    counts); pid, steps_now and alive are the shown rank's (its steps number the window, as the
    other clients')."""

    def __init__(self, endpoint: KinetoEndpoint, ranks: Callable[[], list[RankJob]], pid: int, program: str,
                 steps_now: Callable[[], int], alive: Callable[[], bool]):
        super().__init__(endpoint, pid, program, steps_now, alive)
        self.ranks = ranks
        self.files: dict[int, str] = {}  # rank -> the trace it wrote, in the last window

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
            the_plan = plan(asking)
            folder = check_free_space()
            seq = self._status.seq + 1
            base = os.path.join(folder, f"{safe_file_part(self.program)}-{self.pid}-kineto{seq}-ranks-"
                                        f"{time.strftime('%Y%m%d-%H%M%S')}.json")
            handed: list[RankJob] = []
            for r in asking:
                try:
                    self.endpoint.request_trace(r.pid, base, iterations=steps, start_iteration=the_plan.start_iteration,
                                                start_roundup=the_plan.roundup)
                except (KeyError, RuntimeError):
                    missing.append(r)
                    continue
                handed.append(r)
            if not handed:
                raise CaptureRefused("no rank of the job could be handed Kineto's config")
            self.files = {}
            self._set(seq=seq, state="armed", first_step=0, last_step=0, path="",
                      message=f"waits for the next poll of Kineto's endpoint by {_ranks(handed)} (within "
                              f"{POLL_S:g} s): {the_plan.words}{_missing(missing)}")
        threading.Thread(target=self._ranks_window, args=(base, steps, handed, missing, the_plan),
                         name="tuimon-kineto-ranks-window", daemon=True).start()
        return seq

    def _ranks_window(self, base: str, steps: int, handed: list[RankJob], missing: list[RankJob], the_plan: Plan) -> None:
        try:
            at_hand: dict[int, int | None] = {}  # each rank's step count as it took its config

            def everyone() -> bool:
                taken = [r for r in handed if r.pid not in at_hand and self.endpoint.handed(r.pid) > 0]
                if taken:
                    now = {r.pid: r.steps for r in self.ranks()}
                    at_hand.update((r.pid, now.get(r.pid)) for r in taken)
                return len(at_hand) == len(handed)

            self._until(everyone, kineto_windows.HAND_WAIT_S)
            took = [r for r in handed if r.pid in at_hand]
            missing = missing + [r for r in handed if r not in took]
            if not took:
                self._set(state="failed", message=f"no rank took the config within {kineto_windows.HAND_WAIT_S:g} s"
                                                  f"{_missing(missing)}")
                return
            first, late = the_plan.first_step, []
            if (k := the_plan.start_iteration) is not None:
                # A rank with S steps at its config has Kineto's count S - 1; past K at its next step (S > K),
                # Kineto moves its start to that step: out of line. The count is read just after the
                # hand-over, a step late at most: only S > K + 1 is sure.
                late = [r.rank for r in took if (s := at_hand.get(r.pid)) is not None and s > k + 1]
            else:  # (Kineto rounds the shown rank's count at its next step up to a multiple of R)
                s = self.steps_now() + 1
                first = -(-s // the_plan.roundup) * the_plan.roundup + 2
            ranks_words = (f"on {_ranks(took)} ({len(took)} of {len(took) + len(missing)})"
                           f"{_missing(missing)}")
            lateness = (f"; rank {', '.join(map(str, late))} took the config past the start: its window starts at "
                        "its next step, out of line with the others" if late else "")
            how = "" if the_plan.start_iteration is not None else f"; {the_plan.words}"
            self._set(state="capturing", first_step=first, last_step=first + steps - 1,
                      message=f"Kineto traces {count(steps, 'step')} {ranks_words}{how}{lateness}")
            t0 = time.monotonic()
            paths = {r.rank: trace_file(base, r.pid) for r in took}
            written = lambda: {k: p for k, p in paths.items() if os.path.exists(p)}  # noqa: E731
            if not self._until(lambda: bool(written()), kineto_windows.TRACE_WAIT_S):
                self._set(state="failed", message=f"no trace from Kineto within {kineto_windows.TRACE_WAIT_S:g} s")
                return
            self._until(lambda: len(written()) == len(paths), OTHERS_WAIT_S)
            self.files = files = dict(sorted(written().items()))
            shown = min(files)
            unwritten = sorted(set(paths) - set(files))
            others = "; ".join(f"rank {k}: {p}" for k, p in files.items() if k != shown)
            self._set(state="done", path=files[shown],
                      message=(f"on {count(len(files), 'rank')} of "
                               f"{len(took) + len(missing)}, written by Kineto {time.monotonic() - t0:.1f} s after "
                               f"the configs, while the job ran; rank {shown}'s summary"
                               + (f"; the others' traces: {others}" if others else "")
                               + (f"; no trace from rank {', '.join(map(str, unwritten))} within {OTHERS_WAIT_S:g} s "
                                  "of the first" if unwritten else "") + _missing(missing) + how + lateness))
        except Exception as e:  # noqa: BLE001 - a bug here must not end the monitor
            self._set(state="failed", message=f"{type(e).__name__}: {e}"[:300])


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
    launcher asked for), for `tuimon capture`: each rank's step count and typical step time, read
    at each call of ranks() (from any one thread at a time: a lock)."""

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
                out.append(RankJob(rank, pid, steps if counted else None, typical_ms(log.steps)))
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
