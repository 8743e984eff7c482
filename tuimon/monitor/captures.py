"""The capture windows of the process a live session shows: its client (the probe's control block,
or the job's nsys session under `run --nsys`), opened at the first cycle that shows the process,
its state each cycle, a done window's summary (made on the summary worker) and what the window
cost the job (from its own step times)."""

from __future__ import annotations

from dataclasses import replace

from ..capture import nsys_session
from ..capture.client import CaptureClient, CaptureRefused
from ..capture.cost import window_cost
from ..channel import ChannelError
from ..channel.control import KIND_MEMORY
from ..channel.text import count
from ..model import CaptureStatus, WindowCost
from .summaries import SummaryWorker
from .training import TrainingView


class Captures:
    def __init__(self, summaries: SummaryWorker | None = None):
        self.summaries = summaries or SummaryWorker()
        self.client: CaptureClient | nsys_session.SessionWindows | None = None  # (the latter: `run --nsys`)
        self._costs: dict[tuple[int, int], WindowCost] = {}  # (pid, capture seq) -> its WindowCost, once known

    def status(self, shown: TrainingView, problems: dict) -> CaptureStatus | None:
        """The capture state of the shown process (a client opened for it if none is); a done
        capture carries its summary once the worker has made it. A client that cannot be opened
        or read goes in problems."""
        try:
            if self.client is None:
                reader = shown.source.reader
                info = reader.info
                self.client = nsys_session.for_job(info, lambda: reader.steps) or \
                    CaptureClient(info.path, info.pid, info.start_ticks)
            status = self.client.status()
        except (ChannelError, CaptureRefused) as e:
            problems["capture"] = str(e)
            return None
        if status.state == "done":
            status = replace(status, summary=self.summaries.summary(status), cost=self._cost(shown, status))
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

    def request(self, steps: int | None, seconds: float | None, memory: bool, why_none: str) -> str:
        """(from the UI thread) A few bytes into the control block; what to tell the user. why_none:
        the refusal while no process is shown (no client yet). Raises CaptureRefused."""
        client = self.client
        if client is None:
            raise CaptureRefused(why_none)
        if memory and isinstance(client, nsys_session.SessionWindows):
            raise CaptureRefused("this job's windows are its nsys session's here: `tuimon capture PID --memory` asks "
                                 "its probe for a memory window")
        seq = client.request(steps=steps, seconds=seconds, kind=KIND_MEMORY if memory else 0)
        return f"{'memory ' if memory else ''}capture {seq} asked: {count(steps, 'step') if steps else f'{seconds:g} s'}"

    def close(self) -> None:
        """The shown process changed or its channel broke: close its client (an nsys window still
        collecting is stopped); the next status() opens one for the process shown then."""
        client, self.client = self.client, None
        if client is not None:
            client.close()

    def stop(self) -> None:
        """The session ends: the client closed, the summary being made killed."""
        self.close()
        self.summaries.stop()
