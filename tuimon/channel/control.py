"""The control block: the monitor asks for a capture window, the probe answers with its state.

The monitor writes the request (parameters first, then the sequence number that publishes it);
the probe writes its state (message and path first, then the state record). Either side reads
twice until two reads agree, so a half-written record is never trusted. Text read from here is
untrusted: whatever shows it on a terminal passes it through safe_text.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

from . import layout as L
from .errors import ChannelError
from .reader import open_own_segment

STATE_NAMES = {L.STATE_IDLE: "idle", L.STATE_ARMED: "armed", L.STATE_CAPTURING: "capturing",
               L.STATE_WRITING: "writing", L.STATE_DONE: "done", L.STATE_FAILED: "failed"}
KIND_NSYS, KIND_TORCH = 1, 2
KIND_NAMES = {0: "none", KIND_NSYS: "nsys", KIND_TORCH: "torch.profiler"}
MAX_STEPS, MAX_SECONDS = 500, 300.0  # the probe caps a window at these


@dataclass(frozen=True)
class Request:
    seq: int
    mode: int  # CAPTURE_STEPS or CAPTURE_SECONDS
    steps: int
    seconds: float


@dataclass(frozen=True)
class State:
    ack_seq: int
    state: int
    first_step: int
    last_step: int
    kind: int
    updated_ns: int
    message: str
    path: str

    @property
    def name(self) -> str:
        return STATE_NAMES.get(self.state, f"state {self.state}")

    @property
    def busy(self) -> bool:
        return self.state in (L.STATE_ARMED, L.STATE_CAPTURING, L.STATE_WRITING)


class ControlBlock:
    """Over a buffer that holds the control block at `base` (the probe's whole-segment mapping,
    or the monitor's mapping of the control page alone)."""

    def __init__(self, buf, base: int = 0):
        self.buf, self.base = buf, base

    def _stable(self, read):
        last = read()
        for _ in range(8):
            again = read()
            if again == last:
                return again
            last = again
        raise ChannelError("the control block keeps changing under the reader")

    def read_request(self) -> Request:
        def read():
            return L.CTL_REQUEST.unpack_from(self.buf, self.base + L.CTL_REQUEST_AT)

        seq, mode, steps, seconds = self._stable(read)
        return Request(seq, mode, steps, seconds)

    def write_request(self, seq: int, mode: int, steps: int = 0, seconds: float = 0.0) -> None:
        at = self.base + L.CTL_REQUEST_AT
        L.CTL_REQUEST.pack_into(self.buf, at, self.read_request().seq, mode, steps, seconds)
        L.U64.pack_into(self.buf, at, seq)  # published last

    def read_state(self) -> State:
        def read():
            fields = L.CTL_STATE.unpack_from(self.buf, self.base + L.CTL_STATE_AT)
            msg_len = min(fields[6], L.CTL_MESSAGE_CAPACITY)
            path_len = min(fields[7], L.CTL_PATH_CAPACITY)
            m0, p0 = self.base + L.CTL_MESSAGE_AT, self.base + L.CTL_PATH_AT
            return fields, bytes(self.buf[m0 : m0 + msg_len]), bytes(self.buf[p0 : p0 + path_len])

        fields, msg, path = self._stable(read)
        return State(fields[0], fields[1], fields[2], fields[3], fields[4], fields[5],
                     msg.decode("utf-8", "replace"), path.decode("utf-8", "replace"))

    def write_state(self, ack_seq: int, state: int, first_step: int = 0, last_step: int = 0, kind: int = 0,
                    now_ns: int = 0, message: str = "", path: str = "") -> None:
        msg = message.encode("utf-8", "replace")[: L.CTL_MESSAGE_CAPACITY]
        raw_path = path.encode("utf-8", "replace")[: L.CTL_PATH_CAPACITY]
        m0, p0 = self.base + L.CTL_MESSAGE_AT, self.base + L.CTL_PATH_AT
        self.buf[m0 : m0 + len(msg)] = msg
        self.buf[p0 : p0 + len(raw_path)] = raw_path
        L.CTL_STATE.pack_into(self.buf, self.base + L.CTL_STATE_AT, ack_seq, state, first_step, last_step, kind,
                              now_ns, len(msg), len(raw_path))


def open_control(path: str, expected_uid: int | None = None) -> tuple[ControlBlock, mmap.mmap]:
    """The monitor's writable view of a segment's control page (same ownership rule as reading)."""
    fd, st = open_own_segment(path, writable=True, expected_uid=expected_uid)
    try:
        if st.st_size < L.CONTROL_OFFSET + L.CONTROL_SIZE:
            raise ChannelError(f"{path} is too short to hold a control block")
        mm = mmap.mmap(fd, L.CONTROL_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                       offset=L.CONTROL_OFFSET)
    finally:
        os.close(fd)
    return ControlBlock(mm, 0), mm
