"""The control block: the monitor asks for a capture window (or the threads' stacks), the probe
answers with its state; the probe also says here what the loop is doing now and how the job ended.

The monitor writes the request (parameters first, then the sequence number that publishes it);
the probe writes its state (message and path first, then the state record). Either side reads
twice until two reads agree, so a half-written record is never trusted. Text read from here is
untrusted: whatever shows it on a terminal passes it through safe_text.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from . import layout as L
from .errors import ChannelError
from .fileview import FileView, View, open_own_segment

_T = TypeVar("_T")

STATE_NAMES: dict[int, str] = {L.STATE_IDLE: "idle", L.STATE_ARMED: "armed", L.STATE_CAPTURING: "capturing",
               L.STATE_WRITING: "writing", L.STATE_DONE: "done", L.STATE_FAILED: "failed"}
KIND_NSYS, KIND_TORCH, KIND_MEMORY = 1, 2, 3
KIND_NAMES = {0: "none", KIND_NSYS: "nsys", KIND_TORCH: "torch.profiler", KIND_MEMORY: "memory"}
MAX_STEPS, MAX_SECONDS = 500, 300.0  # the probe caps a window at these
# A request's mode carries the kind of window asked for above its low byte (steps or seconds): 0 is
# the probe's own kind (nsys or torch.profiler). A probe that predates a kind reads an unknown mode
# and refuses it in words, so the layout keeps its version.
KIND_SHIFT = 8


@dataclass(frozen=True)
class Request:
    seq: int
    mode: int  # CAPTURE_STEPS or CAPTURE_SECONDS
    steps: int
    seconds: float

    @property
    def base_mode(self) -> int:
        """CAPTURE_STEPS or CAPTURE_SECONDS (or a mode this probe does not know)."""
        return self.mode & ((1 << KIND_SHIFT) - 1)

    @property
    def kind(self) -> int:
        """The kind of window asked for (0: the probe's own)."""
        return self.mode >> KIND_SHIFT


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
class Now:
    """The step in progress, as the probe's control thread last wrote it (ns: CLOCK_MONOTONIC)."""

    updated_ns: int  # 0: never written (a probe without it, or just started)
    step: int
    source: str  # layout.STEP_SOURCES
    phase_id: int  # name id of the innermost open phase
    collective_id: int  # name id of the last collective the loop called (0: none)
    phase_since_ns: int
    step_t0_ns: int  # 0: no step boundary yet
    moved_ns: int  # when the phase clock last moved
    longest_ns: int  # the longest step so far, the first STALL_WARMUP steps left out (0: none yet)
    where: str  # the loop thread's line by the hot lines' rule (probe/sampler.py LineNames.where): "train.py:41 in
    # main", or an installed library's "transformers/trainer.py:2231 in training_step", or ""
    waiting_in: str  # the innermost frame when it is not that line, or ""
    context: str = ""  # a library's line: the job's own line that led there, "train.py:12" ("": the job's own)


@dataclass(frozen=True)
class End:
    kind: int  # layout.END_NONE, END_EXCEPTION, END_CLEAN
    at_ns: int
    text: str  # for an exception: "Type: message" then its innermost frames, a line each


def _text(raw: str, capacity: int) -> bytes:
    return raw.encode("utf-8", "replace")[:capacity]


def _where(where: str, context: str) -> bytes:
    """The loop's line and its context after L.HOT_CONTEXT, as a HOT record's name carries them:
    the line cut, never the context, where both are longer than the field."""
    if not context:
        return _text(where.replace(L.HOT_CONTEXT, " "), L.CTL_WHERE_CAPACITY)
    tail = (L.HOT_CONTEXT + context.replace(L.HOT_CONTEXT, " ")).encode("utf-8", "replace")[: L.CTL_WHERE_CAPACITY // 2]
    head = where.replace(L.HOT_CONTEXT, " ").encode("utf-8", "replace")
    room = L.CTL_WHERE_CAPACITY - len(tail)
    if len(head) > room:
        head = head[: max(room - 3, 0)].decode("utf-8", "ignore").encode() + "…".encode()
    return head + tail


class ControlBlock:
    """Over a view of the control page (fileview: the probe's mapping, or the monitor's fd)."""

    def __init__(self, view: View):
        self.view = view

    def _stable(self, read: Callable[[], _T]) -> _T:
        last = read()
        for _ in range(8):
            again = read()
            if again == last:
                return again
            last = again
        raise ChannelError("the control block keeps changing under the reader")

    def read_request(self) -> Request:
        def read() -> tuple[Any, ...]:
            return L.CTL_REQUEST.unpack(self.view.read(L.CTL_REQUEST_AT, L.CTL_REQUEST.size))

        seq, mode, steps, seconds = self._stable(read)
        return Request(seq, mode, steps, seconds)

    def write_request(self, seq: int, mode: int, steps: int = 0, seconds: float = 0.0, kind: int = 0) -> None:
        """kind: KIND_MEMORY for an allocator-history window; 0 for the probe's own kind."""
        at = L.CTL_REQUEST_AT
        self.view.write(at, L.CTL_REQUEST.pack(self.read_request().seq, mode | (kind << KIND_SHIFT), steps, seconds))
        self.view.write(at, L.U64.pack(seq))  # published last

    def read_state(self) -> State:
        def read() -> tuple[tuple[Any, ...], bytes, bytes]:
            fields = L.CTL_STATE.unpack(self.view.read(L.CTL_STATE_AT, L.CTL_STATE.size))
            msg_len = min(fields[6], L.CTL_MESSAGE_CAPACITY)
            path_len = min(fields[7], L.CTL_PATH_CAPACITY)
            return fields, self.view.read(L.CTL_MESSAGE_AT, msg_len), self.view.read(L.CTL_PATH_AT, path_len)

        fields, msg, path = self._stable(read)
        return State(ack_seq=fields[0], state=fields[1], first_step=fields[2], last_step=fields[3],
                     kind=fields[4], updated_ns=fields[5],
                     message=msg.decode("utf-8", "replace"), path=path.decode("utf-8", "replace"))

    def write_state(self, ack_seq: int, state: int, first_step: int = 0, last_step: int = 0, kind: int = 0,
                    now_ns: int = 0, message: str = "", path: str = "") -> None:
        msg = message.encode("utf-8", "replace")[: L.CTL_MESSAGE_CAPACITY]
        raw_path = path.encode("utf-8", "replace")[: L.CTL_PATH_CAPACITY]
        self.view.write(L.CTL_MESSAGE_AT, msg)
        self.view.write(L.CTL_PATH_AT, raw_path)
        self.view.write(L.CTL_STATE_AT, L.CTL_STATE.pack(ack_seq, state, first_step, last_step, kind, now_ns,
                                                         len(msg), len(raw_path)))


    # -- the step in progress (probe: the control thread; monitor: reads) --------------------------

    def write_now(self, now: Now) -> None:
        where, waiting = _where(now.where, now.context), _text(now.waiting_in, L.CTL_WHERE_CAPACITY)
        source = L.STEP_SOURCES.index(now.source) if now.source in L.STEP_SOURCES else 0
        self.view.write(L.CTL_WHERE_AT, where)
        self.view.write(L.CTL_WAITING_AT, waiting)
        self.view.write(L.CTL_NOW_AT, L.CTL_NOW.pack(now.updated_ns, now.step, source, now.phase_id, now.collective_id,
                                                     now.phase_since_ns, now.step_t0_ns, now.moved_ns,
                                                     now.longest_ns, len(where), len(waiting)))

    def read_now(self) -> Now | None:
        """None until the probe first wrote it."""
        def read() -> tuple[tuple[Any, ...], bytes, bytes]:
            f = L.CTL_NOW.unpack(self.view.read(L.CTL_NOW_AT, L.CTL_NOW.size))
            return (f, self.view.read(L.CTL_WHERE_AT, min(f[9], L.CTL_WHERE_CAPACITY)),
                    self.view.read(L.CTL_WAITING_AT, min(f[10], L.CTL_WHERE_CAPACITY)))

        f, raw_where, waiting = self._stable(read)
        if f[0] <= 0:
            return None
        where, _, context = raw_where.decode("utf-8", "replace").partition(L.HOT_CONTEXT)
        source = L.STEP_SOURCES[f[2]] if f[2] < len(L.STEP_SOURCES) else "none"
        return Now(updated_ns=f[0], step=f[1], source=source, phase_id=f[3], collective_id=f[4],
                   phase_since_ns=f[5], step_t0_ns=f[6], moved_ns=f[7], longest_ns=f[8],
                   where=where, waiting_in=waiting.decode("utf-8", "replace"), context=context)

    # -- how the job ended (probe: once, at its end) ---------------------------------------------

    def write_end(self, kind: int, at_ns: int, text: str) -> None:
        raw = _text(text, L.CTL_END_CAPACITY)
        self.view.write(L.CTL_END_TEXT_AT, raw)
        self.view.write(L.CTL_END_AT, L.CTL_END.pack(at_ns, kind, len(raw)))

    def read_end(self) -> End:
        def read() -> tuple[int, int, bytes]:
            at, kind, n = L.CTL_END.unpack(self.view.read(L.CTL_END_AT, L.CTL_END.size))
            return at, kind, self.view.read(L.CTL_END_TEXT_AT, min(n, L.CTL_END_CAPACITY))

        at, kind, text = self._stable(read)
        return End(kind if kind in (L.END_EXCEPTION, L.END_CLEAN) else L.END_NONE, at,
                   text.decode("utf-8", "replace"))

    def write_exit(self, how: int, value: int, at_ns: int) -> None:
        """(_exitwatch.c writes it in the job; this twin is for tests and replays)"""
        self.view.write(L.CTL_EXIT_AT + 8, L.CTL_EXIT.pack(0, how, value)[8:])
        self.view.write(L.CTL_EXIT_AT, L.CTL_EXIT.pack(at_ns, 0, 0)[:8])

    def read_exit(self) -> int | None:
        """The process's own word on how it ended: its exit code, or minus the signal that ended it
        (the convention of Popen.returncode); None when it said nothing (alive, killed by SIGKILL,
        os._exit(), a job's own signal handler, no C extension)."""
        at, how, value = self._stable(lambda: L.CTL_EXIT.unpack(self.view.read(L.CTL_EXIT_AT, L.CTL_EXIT.size)))
        if not at:
            return None
        if how == L.EXIT_CODE and 0 <= value <= 255:
            return value
        if how == L.EXIT_SIGNAL and 0 < value < 128:
            return -value
        return None

    # -- the threads' stacks on request ------------------------------------------------------------

    def request_stacks(self, seq: int) -> None:
        self.view.write(L.CTL_STACKS_REQUEST_AT, L.U64.pack(seq))

    def stacks_request(self) -> int:
        return L.U64.unpack(self.view.read(L.CTL_STACKS_REQUEST_AT, 8))[0]


def write_stacks(view: View, answered: int, at_ns: int, text: str) -> None:
    """The probe's side, on a view of the stacks region: the request number goes in last, after a
    zero that tells a reader the text is being replaced."""
    raw = text.encode("utf-8", "replace")[: L.STACKS_CAPACITY - L.STACKS_HEAD.size]
    view.write(0, L.STACKS_HEAD.pack(0, at_ns, 0))
    view.write(L.STACKS_HEAD.size, raw)
    view.write(0, L.STACKS_HEAD.pack(answered, at_ns, len(raw)))


def read_stacks(view: View) -> tuple[int, int, str] | None:
    """(request answered, when written, text), or None while there is none or it is being written."""
    def head() -> tuple[Any, ...]:
        return L.STACKS_HEAD.unpack(view.read(0, L.STACKS_HEAD.size))

    answered, at, n = head()
    if not answered:
        return None
    text = view.read(L.STACKS_HEAD.size, min(n, L.STACKS_CAPACITY - L.STACKS_HEAD.size))
    if head() != (answered, at, n):
        return None  # rewritten while we read: the next poll reads the new one
    return answered, at, text.decode("utf-8", "replace")


def open_control(path: str, expected_uid: int | None = None) -> tuple[ControlBlock, FileView]:
    """The monitor's writable view of a segment's control page (same ownership rule as reading);
    the caller closes the view."""
    fd, st = open_own_segment(path, writable=True, expected_uid=expected_uid)
    if st.st_size < L.CONTROL_OFFSET + L.CONTROL_SIZE:
        os.close(fd)
        raise ChannelError(f"{path} is too short to hold a control block")
    view = FileView(fd, path, L.CONTROL_OFFSET)
    return ControlBlock(view), view
