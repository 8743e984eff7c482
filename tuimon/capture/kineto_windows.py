"""Capture windows through Kineto's on-demand path (issue 41): for a job whose Kineto polls the local
"dynolog" endpoint (started with KINETO_USE_DAEMON=1, as `tuimon run` starts jobs), this monitor
serves the endpoint (capture/kineto_daemon.py) and hands the job a config for N optimizer steps
or a duration; Kineto collects and writes the trace on its own threads, so the loop does not wait
for a stop, a write or a free as it does for a torch.profiler window through the probe.

Same interface as the probe's windows (CaptureClient) and an nsys session's (SessionWindows):
status(), request(), wait(), close(). A job that does not ask the endpoint within one of its poll
intervals (5 s) gets no Kineto window: for_job() returns None (and capture/backends.py refuses a
torch.profiler window in a job in daemon mode).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..channel.paths import safe_file_part
from ..model import CaptureStatus
from .client import CaptureRefused, check_free_space, check_request
from .kineto_daemon import POLL_S, EndpointTaken, KinetoEndpoint
from .monitor_run import MonitorRunWindows

KIND = "kineto"
REGISTER_WAIT_S = POLL_S + 1.5  # a job in daemon mode asks within one poll interval
HAND_WAIT_S = 2 * POLL_S + 1.0  # a config waits for the job's next ask
TRACE_WAIT_S = 600.0  # from the config handed to the trace written (a window of MAX_STEPS long steps)
COST_NOTE = ("Kineto's on-demand path: the trace is collected and written on Kineto's threads; "
             "the window starts at the job's next poll of the endpoint (within 5 s)")


def job_uses_daemon(pid: int) -> bool:
    """Whether the job was started with KINETO_USE_DAEMON set (its environment at exec)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return False
    return any(e.startswith(b"KINETO_USE_DAEMON=") and len(e) > len(b"KINETO_USE_DAEMON=") for e in env.split(b"\0"))


def why_not(pid: int) -> str | None:
    """Why this job's windows do not go through Kineto's path, in words; None when they may."""
    if os.environ.get("TUIMON_KINETO", "1") == "0":
        return "TUIMON_KINETO=0"
    if not job_uses_daemon(pid):
        return "the job was not started with KINETO_USE_DAEMON=1"
    return None


class KinetoWindows(MonitorRunWindows):
    def __init__(self, endpoint: KinetoEndpoint, pid: int, program: str, steps_now: Callable[[], int],
                 alive: Callable[[], bool]):
        self.endpoint, self.pid, self.program = endpoint, pid, program
        self.steps_now, self.alive = steps_now, alive
        self._status = CaptureStatus(seq=0, state="idle", kind=KIND, message=COST_NOTE)
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def status(self) -> CaptureStatus:
        return self._status

    def _set(self, **kw: Any) -> None:
        s = self._status
        self._status = CaptureStatus(seq=kw.get("seq", s.seq), state=kw.get("state", s.state), kind=KIND,
                                     first_step=kw.get("first_step", s.first_step),
                                     last_step=kw.get("last_step", s.last_step),
                                     message=kw.get("message", s.message), path=kw.get("path", s.path),
                                     updated_ns=time.monotonic_ns())

    def request(self, steps: int | None = None, seconds: float | None = None, kind: int = 0) -> int:
        if kind:
            raise CaptureRefused("a memory window is the probe's (`tuimon capture PID --memory`)")
        check_request(self.pid, self.alive(), steps, seconds)
        with self._lock:
            if self._status.busy:
                raise CaptureRefused(f"Kineto window {self._status.seq} is {self._status.state}: one at a time")
            folder = check_free_space()
            seq = self._status.seq + 1
            base = os.path.join(folder, f"{safe_file_part(self.program)}-{self.pid}-kineto{seq}-"
                                        f"{time.strftime('%Y%m%d-%H%M%S')}.json")
            try:
                window = self.endpoint.request_trace(self.pid, base, iterations=steps,
                                                     duration_ms=None if seconds is None else int(seconds * 1000))
            except KeyError:
                raise CaptureRefused(f"process {self.pid} no longer asks Kineto's endpoint") from None
            except RuntimeError as e:
                raise CaptureRefused(str(e)) from None
            self._set(seq=seq, state="armed", first_step=0, last_step=0, path="",
                      message="waits for the job's next poll of Kineto's endpoint (within 5 s)")
        threading.Thread(target=self._window, args=(window.path, steps, seconds), name="tuimon-kineto-window",
                         daemon=True).start()
        return seq

    def _window(self, path: str, steps: int | None, seconds: float | None) -> None:
        try:
            if not self._until(lambda: self.endpoint.handed(self.pid) > 0, HAND_WAIT_S):
                self._set(state="failed", message=f"the job did not take the config within {HAND_WAIT_S:g} s")
                return
            first = self.steps_now() + 1  # (Kineto starts at the next optimizer step)
            self._set(state="capturing", first_step=first, last_step=first - 1,
                      message=f"Kineto traces {steps} steps" if steps else f"Kineto traces {seconds:g} s")
            t0 = time.monotonic()
            written = self._until(lambda: os.path.exists(path), TRACE_WAIT_S)
            last = first + steps - 1 if steps else self.steps_now()
            if not written:
                self._set(state="failed", last_step=last, message=f"no trace from Kineto within {TRACE_WAIT_S:g} s")
                return
            self._set(state="done", last_step=last, path=path,
                      message=f"trace {os.path.getsize(path) / 2**20:.1f} MiB written by Kineto "
                              f"{time.monotonic() - t0:.1f} s after it took the config, while the job ran")
        except Exception as e:  # noqa: BLE001 - a bug here must not end the monitor
            self._set(state="failed", message=f"{type(e).__name__}: {e}"[:300])

    def close(self) -> None:
        """The monitor quits: a window under way is Kineto's, which writes it all the same."""
        self._closed.set()
        self.endpoint.close()


def for_job(pid: int, start_ticks: int, program: str, steps_now: Callable[[], int],
            say: Callable[[str], object] | None = None) -> KinetoWindows | None:
    """The Kineto windows of a job started in daemon mode that asks this host's endpoint, served
    here; None (and why, through say) for any other job."""
    from ..channel import procinfo

    why = why_not(pid)
    if why is None:
        try:
            endpoint = KinetoEndpoint()
        except EndpointTaken as e:
            why = str(e)  # (a real dynolog, or another tuimon: `dyno gputrace` drives that one)
        except OSError as e:
            why = f"Kineto's endpoint cannot be opened: {e.strerror or e}"
        else:
            if endpoint.wait_registered(pid, REGISTER_WAIT_S):
                return KinetoWindows(endpoint, pid, program, steps_now,
                                     lambda: procinfo.process_state(pid, start_ticks) == "alive")
            endpoint.close()
            why = f"the job did not ask Kineto's endpoint within {REGISTER_WAIT_S:g} s"
    if say is not None and why != "the job was not started with KINETO_USE_DAEMON=1":
        say(why)
    return None
