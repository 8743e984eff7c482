"""Segment layout v3 (LAYOUT_VERSION): the one source of truth for offsets, sizes and record formats.

A segment is one file in /dev/shm, written by the probe inside the training process and read by
any number of monitors. Everything is little-endian. The layout:

    [0, 4096)            header page: fixed fields, then dynamic counters on their own cache
                         lines, then the metadata JSON (argv, rank, ...)
    [4096, 8192)         control block: capture request (monitor) and capture state (probe); the
                         step in progress and how the job ended (probe); a stacks request (monitor)
    [8192, +STACKS)      the threads' stacks, written by the probe when a monitor asks
    [.., +NAMES)         name table: append-only entries of (u16 length, utf-8 bytes)
    [ring_offset, end)   ring: RING_RECORDS fixed-size records, indexed by a free-running u64
                         write counter (ring_head) that the writer publishes after each record

Readers trust nothing in a segment: every offset and length here is checked against the file.
"""

from __future__ import annotations

import struct
from enum import IntEnum

MAGIC = b"TUIMONCH"
LAYOUT_VERSION = 3  # v3: the step in progress, the job's end, the threads' stacks, hot lines (v2: the anatomy)

PAGE = 4096
HEADER_SIZE = PAGE
CONTROL_OFFSET = PAGE
CONTROL_SIZE = PAGE
STACKS_OFFSET = 2 * PAGE
STACKS_CAPACITY = 64 * 1024
NAMES_OFFSET = STACKS_OFFSET + STACKS_CAPACITY
NAMES_CAPACITY = 256 * 1024  # (the sampler's hot lines are names too: up to MAX_LINES of them)
RING_OFFSET = NAMES_OFFSET + NAMES_CAPACITY
DEFAULT_RING_RECORDS = 1 << 16  # 3 MiB of records: 0.3 s at 200k ranges/s, 3x a 10 Hz drain
MIN_RING_RECORDS = 64
MAX_RING_RECORDS = 1 << 24

MAX_NAME_BYTES = 200  # longer names are cut at a UTF-8 boundary
NAME_LEN = struct.Struct("<H")

# Fixed header fields, written once when the segment is created.
HEADER = struct.Struct(
    "<8s"  # 0   magic
    "I"  # 8   layout version
    "I"  # 12  header size
    "Q"  # 16  total size of the segment
    "I"  # 24  control offset
    "I"  # 28  control size
    "I"  # 32  names offset
    "I"  # 36  names capacity (bytes)
    "I"  # 40  ring offset
    "I"  # 44  ring capacity (records, a power of two)
    "I"  # 48  record size
    "I"  # 52  writer pid
    "Q"  # 56  writer process start time (clock ticks since boot, /proc/PID/stat field 22)
    "Q"  # 64  created (CLOCK_MONOTONIC ns)
    "I"  # 72  metadata offset
    "I"  # 76  metadata length (bytes of JSON)
    "I"  # 80  writer uid
)

# Dynamic header fields (each read or written alone).
OFF_FLAGS = 96  # u32: FLAG_CLOSED once the writer's process exits cleanly
OFF_CLOSED_NS = 104  # u64: when it closed (CLOCK_MONOTONIC ns)
OFF_HEARTBEAT_NS = 128  # u64: last sign of life from the training loop
OFF_STEPS = 136  # u64: completed steps
OFF_NAMES_USED = 144  # u64: bytes of the name table in use (published after the entry)
OFF_NAME_COUNT = 152  # u64: names in the table (published after names_used)
OFF_RING_HEAD = 192  # u64: records ever written; its own cache line
META_OFFSET = 256
META_CAPACITY = HEADER_SIZE - META_OFFSET

FLAG_CLOSED = 1

U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")

# One ring record: what happened, where, and when (CLOCK_MONOTONIC ns).
RECORD = struct.Struct(
    "<B"  # kind
    "B"  # depth (nesting level on its thread, 0 = top level)
    "H"  # flags (reserved, 0)
    "I"  # name id (index into the name table, 1-based; 0 = no name)
    "I"  # thread (OS thread id)
    "I"  # step the record belongs to (1-based; a STEP record: the step it ends)
    "q"  # t0
    "q"  # t1
    "d"  # value (COUNT: the amount)
    "Q"  # sequence number (== its ring index; a check against corruption)
)
RECORD_SIZE = RECORD.size  # 48

# Record kinds.
RANGE = 1  # a named range on a thread: t0..t1
STEP = 2  # a step boundary: the step ran t0..t1
DATA_WAIT = 3  # the loop blocked in next() on a DataLoader iterator: t0..t1
COUNT = 4  # a counter increment (samples, tokens): value at t1
PHASE = 5  # the loop thread's exclusive time in a phase (name) during the step: value ns, at t1
STEP_VALUE = 6  # a number about the step (name: "sync.count", "gpu.step_ns", ...): value
GAUGE = 7  # a level at t1, not tied to a step (name: "cuda.allocated", ...): value
SITE = 8  # a device-to-host sync call site (name "file:line") during the step: value = estimated calls, t0 = the
# loop's time blocked in them (ns, estimated: each walked sync's own wait x the syncs it stands for; probe/anatomy.py
# says how good an estimate), t1 = the step's end. t0 0: not timed (a probe before it, or no walk with a wait)
HOT = 9  # the loop thread's samples at a line (name) in the step: value = samples, depth = the phase open
# (anatomy.PHASES index), t0 = how the thread was (HOW_*), t1 = when counted. The line is the job's own or an
# installed library's; a library's name carries after HOT_CONTEXT the job's own line that led there
# ("transformers/trainer.py:2231 in training_step `...`" HOT_CONTEXT "hf_train.py:40"; probe/sampler.py)
HOT_CONTEXT = "\x1f"  # (a control character: no source line's text holds one, the sampler replaces any)
KINDS = (RANGE, STEP, DATA_WAIT, COUNT, PHASE, STEP_VALUE, GAUGE, SITE, HOT)  # _fastring.c: KIND_MAX
KIND_NAMES = {RANGE: "range", STEP: "step", DATA_WAIT: "data_wait", COUNT: "count", PHASE: "phase",
              STEP_VALUE: "step_value", GAUGE: "gauge", SITE: "site", HOT: "hot"}
NOTE_PREFIX = "probe.note:"  # a GAUGE whose name is this + what went wrong in the probe (Probe.say): the job's
# streams are the job's, so the probe tells the monitor here (the name table cuts it at MAX_NAME_BYTES)


class Phase(IntEnum):
    """The step's exclusive phases on the loop thread (probe/anatomy.py): a PHASE record's name is
    PHASES[id], a HOT record's depth is one of these; the phase clock (_phases.c, phases_py.py) takes
    them as ids (an int subclass: PyLong_AsLong reads it as it reads an int)."""

    OTHER = 0
    DATA = 1
    FORWARD = 2
    BACKWARD = 3
    OPTIMIZER = 4
    SYNC = 5
    COMM = 6
    COPY = 7


PHASES = tuple(p.name.lower() for p in Phase)  # the phases' names, by id: "other", "data", ... "copy"
HOW_PYTHON, HOW_NATIVE, HOW_WAITING = 0, 1, 2  # a sample's thread: running Python, in a native call on a
HOWS = ("python", "native", "waiting")  # CPU, or in a native call blocked (a sleep, a lock, I/O, the GPU)

# Control block (offsets within it). The monitor writes the request; the probe the rest.
CTL_REQUEST = struct.Struct("<QIId")  # seq, mode, steps, seconds
CTL_REQUEST_AT = 0
CTL_STATE = struct.Struct("<QIIIIQII")  # ack seq, state, first step, last step, kind, updated ns,
CTL_STATE_AT = 64  # message length, path length
CTL_MESSAGE_AT = 128
CTL_MESSAGE_CAPACITY = 256
CTL_PATH_AT = 384
CTL_PATH_CAPACITY = 1024

# The step in progress (control block, written by the probe's control thread every ~0.2 s, never
# by the loop): when written (0: never), the step in progress, its source (STEP_SOURCES), the
# innermost open phase (a name id), the last collective the loop called (a name id; 0: none), since
# when the phase is the innermost, when the step began (0: no
# boundary yet), when the phase clock last moved, the longest step so far (its warm-up left out),
# the two position texts' lengths. A reader reads
# it twice until two reads agree.
CTL_NOW = struct.Struct("<qIIIIqqqqII")  # updated, step, source, phase id, last collective id, phase since,
CTL_NOW_AT = 1536                       # step t0, moved, longest step (ns), where length, waiting-in length
CTL_WHERE_AT = 1600  # the loop thread's innermost frame in the job's own code: "train.py:41 in main"
CTL_WAITING_AT = 1856  # ...and its innermost frame, when elsewhere: "queue.py:180 in get"
CTL_WHERE_CAPACITY = 256
# Stacks: the monitor writes a request number; the probe answers in the stacks region.
CTL_STACKS_REQUEST_AT = 2112  # u64
# How the job ended, as the probe saw it (written once: an uncaught exception, or a clean exit).
CTL_END = struct.Struct("<qII")  # when (0: not ended), kind (END_*), text length
CTL_END_AT = 2176
CTL_END_TEXT_AT = 2192
CTL_END_CAPACITY = 1536  # -> 3728, inside the page


class EndKind(IntEnum):
    """How the job ended, as the probe saw it (CTL_END's kind)."""

    NONE = 0
    EXCEPTION = 1
    CLEAN = 2


END_NONE, END_EXCEPTION, END_CLEAN = EndKind
# How the process ended, as the process itself said it where no Python runs any more (_exitwatch.c:
# glibc's on_exit() for the exit status, a handler on signals left at their default action):
# when (0: not said; published last), how (EXIT_*), the exit code or the signal's number.
CTL_EXIT = struct.Struct("<qii")
CTL_EXIT_AT = 3728  # (after the end's text) -> 3744, inside the page
EXIT_NONE, EXIT_CODE, EXIT_SIGNAL = 0, 1, 2
STACKS_HEAD = struct.Struct("<QqI4x")  # request answered, when written, text length; text follows


class StepSource(IntEnum):
    """What calls the step boundary (probe/core.py, where the comment above its aliases says why in
    this order), weakest first: CTL_NOW's source and the "step.source" gauge's value."""

    NONE = 0
    DATALOADER = 1
    FORWARD = 2
    BACKWARD = 3
    OPTIMIZER = 4
    EXPLICIT = 5  # tuimon.step()


STEP_SOURCES = ("none", "dataloader", "forward", "backward", "optimizer", "tuimon.step")  # by StepSource id


class CaptureMode(IntEnum):
    """A capture request's mode (CTL_REQUEST)."""

    NONE = 0
    STEPS = 1
    SECONDS = 2


class CaptureState(IntEnum):
    """A capture window's state (CTL_STATE), written by the probe."""

    IDLE = 0
    ARMED = 1
    CAPTURING = 2
    WRITING = 3
    DONE = 4
    FAILED = 5


CAPTURE_NONE, CAPTURE_STEPS, CAPTURE_SECONDS = CaptureMode
STATE_IDLE, STATE_ARMED, STATE_CAPTURING, STATE_WRITING, STATE_DONE, STATE_FAILED = CaptureState


def ring_bytes(records: int) -> int:
    return records * RECORD_SIZE


def segment_size(ring_records: int) -> int:
    return RING_OFFSET + ring_bytes(ring_records)


def valid_ring_records(n: int) -> bool:
    return MIN_RING_RECORDS <= n <= MAX_RING_RECORDS and n & (n - 1) == 0
