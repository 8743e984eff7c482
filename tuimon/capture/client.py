"""Ask a probe for a capture window through its control block, and follow the answer."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from ..channel import layout as L
from ..channel import procinfo
from ..channel.control import KIND_NAMES, MAX_SECONDS, MAX_STEPS, open_control
from ..channel.paths import capture_floor_bytes, captures_dir, free_bytes
from ..model import CaptureStatus


def window_steps(state: str, first: object, last: object) -> str:
    """"steps a..b" for a window that has covered steps, else "" (an armed window, or a window in
    seconds over a loop without steps)."""
    if state in ("capturing", "writing", "done", "failed") and isinstance(first, int) and isinstance(last, int) \
            and 1 <= first <= last:
        return f"steps {first}..{last}"
    return ""


MEMORY_STEPS = 5  # a memory window's default length (its history grows with every allocation)


class CaptureRefused(Exception):
    """Said to the person who asked: why no capture was started."""


def check_request(pid: int, alive: bool, steps: int | None, seconds: float | None) -> None:
    """What every kind of window refuses before anything else. Raises CaptureRefused."""
    if not alive:
        raise CaptureRefused(f"process {pid} has exited: there is nothing to capture")
    if (steps is None) == (seconds is None):
        raise CaptureRefused("ask for either a number of steps or a number of seconds")
    if steps is not None and not 1 <= steps <= MAX_STEPS:
        raise CaptureRefused(f"a window is 1 to {MAX_STEPS} steps")
    if seconds is not None and not 0.1 <= seconds <= MAX_SECONDS:
        raise CaptureRefused(f"a window is 0.1 to {MAX_SECONDS:g} seconds")


def check_free_space() -> str:
    """The captures folder, when it can be written and has room for a window (made if missing).
    Raises CaptureRefused: a folder that cannot be used is said as such, never raised as it came."""
    folder = captures_dir(create=False)
    name = f"the captures folder {folder}" + (" (TUIMON_CAPTURE_DIR)" if os.environ.get("TUIMON_CAPTURE_DIR") else "")
    try:
        captures_dir()
        if not os.access(folder, os.W_OK | os.X_OK):
            raise CaptureRefused(f"{name} cannot be written: no permission")
        free = free_bytes(folder)
    except (FileExistsError, NotADirectoryError):
        raise CaptureRefused(f"{name} is not a folder") from None
    except OSError as e:
        raise CaptureRefused(f"{name} cannot be used: {e.strerror or e}") from None
    if free < capture_floor_bytes():
        raise CaptureRefused(f"less than {capture_floor_bytes() >> 20} MiB free in {folder}")
    return folder


class CaptureClient:
    def __init__(self, segment_path: str, pid: int, start_ticks: int):
        self.pid, self.start_ticks = pid, start_ticks
        self.ctl, self._view = open_control(segment_path)

    def _alive(self) -> bool:
        return procinfo.process_state(self.pid, self.start_ticks) == "alive"

    def status(self) -> CaptureStatus:
        """The probe's last word on the capture; a window the process died inside is failed
        (the probe can no longer say so itself)."""
        st = self.ctl.read_state()
        status = CaptureStatus(seq=st.ack_seq, state=st.name, kind=KIND_NAMES.get(st.kind, "?"),
                               first_step=st.first_step, last_step=st.last_step,
                               message=st.message, path=st.path, updated_ns=st.updated_ns)
        if status.busy and not self._alive():
            return CaptureStatus(seq=st.ack_seq, state="failed", kind=status.kind, first_step=st.first_step,
                                 last_step=st.last_step, path=st.path, updated_ns=st.updated_ns,
                                 message=f"the process exited while the capture was {st.name}: nothing was "
                                         "written")
        return status

    def request(self, steps: int | None = None, seconds: float | None = None, kind: int = 0) -> int:
        """Ask for a window (kind: KIND_MEMORY for the allocator's history; 0: the probe's own kind);
        returns its sequence number. Raises CaptureRefused."""
        check_request(self.pid, self._alive(), steps, seconds)
        st = self.ctl.read_state()
        if st.busy:
            raise CaptureRefused(f"a capture is already {st.name} (one at a time)")
        pending = self.ctl.read_request().seq
        if pending > st.ack_seq:
            raise CaptureRefused(f"capture {pending} is already asked for and waits for the probe (one at a time)")
        check_free_space()
        seq = max(pending, st.ack_seq) + 1
        if steps is not None:
            self.ctl.write_request(seq, L.CaptureMode.STEPS, steps=steps, kind=kind)
        else:
            assert seconds is not None  # (check_request: steps or seconds)
            self.ctl.write_request(seq, L.CaptureMode.SECONDS, seconds=seconds, kind=kind)
        return seq

    def wait(self, seq: int, timeout: float, on_change: Callable[[CaptureStatus], object] | None = None,
             on_poll: Callable[[], object] | None = None) -> CaptureStatus:
        """Until the window `seq` is done or failed. Raises CaptureRefused when the probe never
        took the request within timeout; a window still running at timeout is returned as it is.
        on_poll: called every ~0.1 s while waiting (to drain the job's channel meanwhile)."""
        end = time.monotonic() + timeout
        last = None
        while True:
            if on_poll is not None:
                on_poll()
            st = self.status()
            if st.seq == seq and st != last and on_change is not None:
                on_change(st)
            last = st
            if st.seq == seq and st.state in ("done", "failed"):
                return st
            if st.seq != seq and not self._alive():
                raise CaptureRefused(f"process {self.pid} exited before it took the request")
            if time.monotonic() >= end:
                break
            time.sleep(0.1)
        if last.seq != seq:
            raise CaptureRefused(f"the probe did not take the request within {timeout:g} s "
                                 "(is the process stuck, or not stepping?)")
        return last

    def close(self) -> None:
        self._view.close()
