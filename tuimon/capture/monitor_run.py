"""What the windows run from the monitor share (an nsys session's, Kineto's): their status, kept by
the window's own thread, followed by wait(); a condition polled until true, the job's exit or close()."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..model import CaptureStatus

WAIT_POLL_S = 0.05  # wait()'s look at the status: progress lines come this often at most


class MonitorRunWindows:
    """Mixed into a window client whose windows the monitor runs: it sets pid, alive, _status and
    _closed; POLL_S and FAILED say how _until polls and what it raises."""

    pid: int
    alive: Callable[[], bool]
    _status: CaptureStatus
    _closed: threading.Event
    POLL_S = 0.02
    FAILED: type[Exception] = RuntimeError

    def _until(self, done: Callable[[], bool], timeout: float) -> bool:
        """Poll done() every POLL_S until true (True), timeout (False), or FAILED: the job's exit or close()."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if done():
                return True
            if self._closed.is_set():
                raise self.FAILED("the monitor quit")
            if not self.alive():
                raise self.FAILED(f"process {self.pid} exited during the window")
            time.sleep(self.POLL_S)
        return False

    def wait(self, seq: int, timeout: float, on_change: Callable[[CaptureStatus], object] | None = None,
             on_poll: Callable[[], object] | None = None) -> CaptureStatus:
        """Window seq's status once done or failed, or as it is after timeout; on_change on each change."""
        end = time.monotonic() + timeout
        last = None
        while True:
            if on_poll is not None:
                on_poll()
            st = self._status
            if st.seq == seq and st != last and on_change is not None:
                on_change(st)
            last = st
            if st.seq == seq and st.state in ("done", "failed") or time.monotonic() >= end:
                return st
            time.sleep(WAIT_POLL_S)
