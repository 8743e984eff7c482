"""Ask a probe for a capture window through its control block, and follow the answer."""

from __future__ import annotations

import time

from ..channel import layout as L
from ..channel import procinfo
from ..channel.control import MAX_SECONDS, MAX_STEPS, State, open_control
from ..channel.paths import capture_floor_bytes, captures_dir, free_bytes


def window_steps(state: str, first, last) -> str:
    """"steps a..b" for a window that has covered steps, else "" (an armed window, or a window in
    seconds over a loop without steps)."""
    if state in ("capturing", "writing", "done", "failed") and isinstance(first, int) and isinstance(last, int) \
            and 1 <= first <= last:
        return f"steps {first}..{last}"
    return ""


class CaptureRefused(Exception):
    """Said to the person who asked: why no capture was started."""


class CaptureClient:
    def __init__(self, segment_path: str, pid: int, start_ticks: int):
        self.pid, self.start_ticks = pid, start_ticks
        self.ctl, self._mm = open_control(segment_path)

    def state(self) -> State:
        return self.ctl.read_state()

    def request(self, steps: int | None = None, seconds: float | None = None) -> int:
        """Ask for a window; returns its sequence number. Raises CaptureRefused."""
        if procinfo.process_state(self.pid, self.start_ticks) != "alive":
            raise CaptureRefused(f"process {self.pid} has exited: there is nothing to capture")
        if (steps is None) == (seconds is None):
            raise CaptureRefused("ask for either a number of steps or a number of seconds")
        if steps is not None and not 1 <= steps <= MAX_STEPS:
            raise CaptureRefused(f"a window is 1 to {MAX_STEPS} steps")
        if seconds is not None and not 0.1 <= seconds <= MAX_SECONDS:
            raise CaptureRefused(f"a window is 0.1 to {MAX_SECONDS:g} seconds")
        st = self.state()
        if st.busy:
            raise CaptureRefused(f"a capture is already {st.name} (one at a time)")
        pending = self.ctl.read_request().seq
        if pending > st.ack_seq and procinfo.process_state(self.pid, self.start_ticks) == "alive":
            raise CaptureRefused(f"capture {pending} is already asked for and waits for the probe (one at a time)")
        folder = captures_dir()
        if free_bytes(folder) < capture_floor_bytes():
            raise CaptureRefused(f"less than {capture_floor_bytes() >> 20} MiB free in {folder}")
        seq = max(pending, st.ack_seq) + 1
        if steps is not None:
            self.ctl.write_request(seq, L.CAPTURE_STEPS, steps=steps)
        else:
            self.ctl.write_request(seq, L.CAPTURE_SECONDS, seconds=seconds)
        return seq

    def wait(self, seq: int, timeout: float, on_change=None) -> State:
        """Until the window `seq` is done or failed (or timeout: the last state seen)."""
        end = time.monotonic() + timeout
        last = None
        while time.monotonic() < end:
            st = self.state()
            if st != last and on_change is not None and st.ack_seq == seq:
                on_change(st)
            last = st
            if st.ack_seq == seq and st.state in (L.STATE_DONE, L.STATE_FAILED):
                return st
            if procinfo.process_state(self.pid, self.start_ticks) != "alive":
                raise CaptureRefused(f"process {self.pid} exited before the capture finished (last state: {st.name})")
            time.sleep(0.1)
        if last is None or last.ack_seq != seq:
            raise CaptureRefused("the probe did not take the request (is the process stuck, or not stepping?)")
        return last

    def close(self) -> None:
        self._mm.close()
