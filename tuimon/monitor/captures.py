"""The capture windows of the process a live session shows: its client (chosen by
capture/backends.py, as `tuimon capture` chooses: the probe's control block, the job's nsys
session under `run --nsys`, or Kineto's on-demand path for a job in its daemon mode), opened at
the first cycle that shows the process, its state each cycle, a done window's summary (made on
the summary worker) and what the window cost the job (from its own step times).

Kineto's path is chosen at `c`: whether the job asks this host's endpoint takes up to ~6.5 s to
find out, so that runs on a thread of its own (never the sampler's, never the UI's), and the
status says "asking Kineto's endpoint" meanwhile."""

from __future__ import annotations

import threading
from dataclasses import replace

from ..capture import backends, nsys_session
from ..capture.backends import Ask, RanksNow, WindowClient
from ..capture.client import CaptureClient, CaptureRefused
from ..capture.cost import window_cost
from ..capture.ncu import with_ncu_commands
from ..channel import ChannelError
from ..channel.control import KIND_MEMORY
from ..channel.text import count
from ..model import CaptureStatus, WindowCost
from .summaries import SummaryWorker
from .training import TrainingView

ASKING = "asking Kineto's endpoint (the job polls it every 5 s)"
NEXT = "the job is in Kineto's daemon mode: c asks its endpoint first (the probe's window if it does not answer)"


class Captures:
    def __init__(self, summaries: SummaryWorker | None = None):
        self.summaries = summaries or SummaryWorker()
        self.client: WindowClient | None = None
        self._costs: dict[tuple[int, str, int], WindowCost] = {}  # (pid, kind, seq) -> its WindowCost, once known
        self._lock = threading.Lock()  # (the client is swapped by the chooser's thread, read by the sampler's)
        self._shown: TrainingView | None = None
        self._source: str | None = None  # what counts the shown job's steps (Kineto counts optimizer steps)
        self._asking: CaptureStatus | None = None  # while the chooser's thread asks Kineto's endpoint
        self._generation = 0  # one more at every close(): a chooser's answer for a process no longer shown is dropped
        self.note: str | None = None  # why the last window of a job in Kineto's daemon mode was the probe's
        self._daemon_pid, self._daemon = 0, False  # whether that process is in Kineto's daemon mode
        self.ranks: RanksNow | None = None  # the job's ranks when the session follows several (set by the session)

    def status(self, shown: TrainingView, problems: dict, step_source: str | None = None) -> CaptureStatus | None:
        """The capture state of the shown process (a client opened for it if none is); a done
        capture carries its summary once the worker has made it. A client that cannot be opened
        or read goes in problems."""
        self._shown, self._source = shown, step_source
        try:
            with self._lock:
                client = self.client
                if client is None:
                    reader = shown.source.reader
                    client = self.client = backends.choose(reader.info, lambda: reader.steps)
                asking = self._asking
            status = asking or client.status()
        except (ChannelError, CaptureRefused) as e:
            problems["capture"] = str(e)
            return None
        if status.state == "idle" and self._kineto_next(shown, client, step_source):
            status = replace(status, kind="kineto", message=NEXT)  # (what `c` takes: the line says kineto)
        if self.note:
            problems["capture"] = self.note
        if status.state == "done":
            info = shown.source.reader.info
            summary = with_ncu_commands(self.summaries.summary(status), status, info.pid, list(info.meta.argv))
            status = replace(status, summary=summary, cost=self._cost(shown, status))
        return status

    def _kineto_next(self, shown: TrainingView, client: WindowClient, step_source: str | None) -> bool:
        """Whether `c` would try Kineto's path now (the job's environment read once per process)."""
        if not isinstance(client, CaptureClient):
            return False
        pid = shown.source.reader.info.pid
        if self._daemon_pid != pid:
            self._daemon_pid, self._daemon = pid, backends.kineto_why_not(pid, Ask(1, None), "optimizer") is None
        return self._daemon and step_source == "optimizer"

    def _cost(self, shown: TrainingView, status: CaptureStatus) -> WindowCost | None:
        """What the done window cost the job, from the shown process's own step times (None until
        the steps just past its end are in)."""
        key = (shown.source.reader.info.pid, status.kind, status.seq)
        cost = self._costs.get(key)
        if cost is None:
            cost = window_cost(shown.step_log.steps, status.first_step, status.last_step, status.updated_ns)
            if cost is not None:
                self._costs[key] = cost
        return cost

    def request(self, steps: int | None, seconds: float | None, memory: bool, why_none: str) -> str:
        """(from the UI thread) What to tell the user; raises CaptureRefused. The probe's window: a
        few bytes into the control block; Kineto's: the endpoint asked on a thread of its own."""
        with self._lock:
            client, shown, asking = self.client, self._shown, self._asking
        if client is None or shown is None:
            raise CaptureRefused(why_none)
        if asking is not None and asking.busy:
            raise CaptureRefused("Kineto's endpoint is being asked for the last window: one at a time")
        self._asking = None  # (a failed ask, said until the next window)
        if memory and isinstance(client, nsys_session.SessionWindows):
            raise CaptureRefused("this job's windows are its nsys session's here: `tuimon capture PID --memory` asks "
                                 "its probe for a memory window")
        reader = shown.source.reader
        ask = Ask(steps, seconds, memory)
        self.note = None
        what = f"{'memory ' if memory else ''}capture {{}}asked: {count(steps, 'step') if steps else f'{seconds:g} s'}"
        if backends.may_wait(reader.info, ask, self._source, client, self.ranks):
            _one_at_a_time(client)
            with self._lock:
                self._asking = CaptureStatus(seq=0, state="armed", kind="kineto", message=ASKING)
                generation = self._generation
            threading.Thread(target=self._choose_and_request, args=(shown, ask, generation),
                             name="tuimon-capture-choose", daemon=True).start()
            return what.format("") + " (" + ASKING + ")"
        chosen = backends.choose(reader.info, lambda: reader.steps, ask, self._source, current=client, say=self._said,
                                 ranks=self.ranks)
        if chosen is not client:
            try:
                _one_at_a_time(client)  # (the client replaced is closed: not while its window runs)
            except CaptureRefused:
                chosen.close()
                raise
            self._swap(chosen)
        return what.format(f"{chosen.request(steps=steps, seconds=seconds, kind=KIND_MEMORY if memory else 0)} ")

    def _said(self, words: str) -> None:
        if words.startswith("a torch.profiler window"):
            self.note = words

    def _swap(self, chosen: WindowClient) -> WindowClient:
        """chosen becomes the client; the one it replaces is closed."""
        with self._lock:
            old, self.client = self.client, chosen
        if old is not None and old is not chosen:
            old.close()
        return chosen

    def _choose_and_request(self, shown: TrainingView, ask: Ask, generation: int) -> None:
        """(the chooser's thread) Kineto's client if the job asks the endpoint, else the probe's; the
        window asked of it. A refusal there is said as a failed window."""
        reader = shown.source.reader
        self.note = None
        try:
            chosen = backends.choose(reader.info, lambda: reader.steps, ask, self._source, current=self.client,
                                     say=self._said, ranks=self.ranks)
            with self._lock:
                if generation != self._generation:  # (the shown process changed meanwhile)
                    stale = True
                else:
                    stale, old, self.client = False, self.client, chosen
            if stale:
                if chosen is not self.client:
                    chosen.close()
                return
            if old is not None and old is not chosen:
                old.close()
            chosen.request(steps=ask.steps, seconds=ask.seconds, kind=KIND_MEMORY if ask.memory else 0)
        except (CaptureRefused, ChannelError, OSError) as e:
            self._asking = CaptureStatus(seq=0, state="failed", kind="kineto", message=str(e))
            return
        self._asking = None

    def close(self) -> None:
        """The shown process changed or its channel broke: close its client (an nsys window still
        collecting is stopped; Kineto's endpoint closed: a window under way is still written by
        Kineto); the next status() opens one for the process shown then."""
        with self._lock:
            client, self.client = self.client, None
            self._generation += 1
            self._asking, self.note = None, None
        if client is not None:
            client.close()

    def stop(self) -> None:
        """The session ends: the client closed, the summary being made killed."""
        self.close()
        self.summaries.stop()


def _one_at_a_time(client: WindowClient) -> None:
    """Raises CaptureRefused while the client's window is under way (it would be closed)."""
    st = client.status()
    if st.busy:
        raise CaptureRefused(f"a capture is already {st.state} (one at a time)")
