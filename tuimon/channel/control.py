"""The control block: the monitor asks for a capture window, the probe answers with its state.

The monitor writes the request (parameters first, then the sequence number that publishes it);
the probe writes its state (message and path first, then the state record). Either side reads
twice until two reads agree, so a half-written record is never trusted. Text read from here is
untrusted: whatever shows it on a terminal passes it through safe_text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from . import layout as L
from .errors import ChannelError
from .fileview import FileView
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
    """Over a view of the control page (fileview: the probe's mapping, or the monitor's fd)."""

    def __init__(self, view):
        self.view = view

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
            return L.CTL_REQUEST.unpack(self.view.read(L.CTL_REQUEST_AT, L.CTL_REQUEST.size))

        seq, mode, steps, seconds = self._stable(read)
        return Request(seq, mode, steps, seconds)

    def write_request(self, seq: int, mode: int, steps: int = 0, seconds: float = 0.0) -> None:
        at = L.CTL_REQUEST_AT
        self.view.write(at, L.CTL_REQUEST.pack(self.read_request().seq, mode, steps, seconds))
        self.view.write(at, L.U64.pack(seq))  # published last

    def read_state(self) -> State:
        def read():
            fields = L.CTL_STATE.unpack(self.view.read(L.CTL_STATE_AT, L.CTL_STATE.size))
            msg_len = min(fields[6], L.CTL_MESSAGE_CAPACITY)
            path_len = min(fields[7], L.CTL_PATH_CAPACITY)
            return fields, self.view.read(L.CTL_MESSAGE_AT, msg_len), self.view.read(L.CTL_PATH_AT, path_len)

        fields, msg, path = self._stable(read)
        return State(fields[0], fields[1], fields[2], fields[3], fields[4], fields[5],
                     msg.decode("utf-8", "replace"), path.decode("utf-8", "replace"))

    def write_state(self, ack_seq: int, state: int, first_step: int = 0, last_step: int = 0, kind: int = 0,
                    now_ns: int = 0, message: str = "", path: str = "") -> None:
        msg = message.encode("utf-8", "replace")[: L.CTL_MESSAGE_CAPACITY]
        raw_path = path.encode("utf-8", "replace")[: L.CTL_PATH_CAPACITY]
        self.view.write(L.CTL_MESSAGE_AT, msg)
        self.view.write(L.CTL_PATH_AT, raw_path)
        self.view.write(L.CTL_STATE_AT, L.CTL_STATE.pack(ack_seq, state, first_step, last_step, kind, now_ns,
                                                         len(msg), len(raw_path)))


def open_control(path: str, expected_uid: int | None = None) -> tuple[ControlBlock, FileView]:
    """The monitor's writable view of a segment's control page (same ownership rule as reading);
    the caller closes the view."""
    fd, st = open_own_segment(path, writable=True, expected_uid=expected_uid)
    if st.st_size < L.CONTROL_OFFSET + L.CONTROL_SIZE:
        os.close(fd)
        raise ChannelError(f"{path} is too short to hold a control block")
    view = FileView(fd, path, L.CONTROL_OFFSET)
    return ControlBlock(view), view
