"""Appending records to a segment's ring, and the enter/exit of a named range: the probe's hot path.

Two implementations of one interface: the C extension `_fastring` (built by `pip install`; see
_fastring.c for why) and `ring_py`, used when the extension is missing or TUIMON_PURE_PYTHON=1.
The tests run both; IMPLEMENTATION says which one this process uses.

- RingWriter(buffer, ring_offset, ring_records, head_offset, steps_offset, heartbeat_offset=-1):
  .emit(kind, depth, name_id, tid, step, t0, t1, value=0.0) appends one record and never raises (a
  bad value disables the writer with a reason); .publish_steps(steps, now_ns) sets the header's
  completed steps and heartbeat; .disable(reason), .head, .enabled, .error.
- bind(ring, names, intern, nvtx_push=None, nvtx_pop=None, count=None): where Range and count
  records go (count: the Python count for what count() does not take itself); bind(None) stops.
- count(name, n=1): tuimon.count: a COUNT record stamped as a Range's (nothing when none is bound).
- Range(name): context manager; on exit writes a RANGE record stamped with the header's current
  step (completed steps + 1), this thread's depth and OS thread id.
- depth_enter(), depth(), set_depth(d): the per-thread nesting depth every kind of range shares;
  thread_id(): the OS thread id records carry.
- Phases(ring, ids, sync_count_id, sync_phase, walks, loop): the step's phase clock (the probe's
  anatomy; _phases.c / phases_py.py): enter/exit/move/count_sync/close/restart/reset/on_loop.
- unpack_records(data, first_seq) -> (records, corrupt): the reader's side: layout.RECORD tuples
  of a copied run of the ring, keeping those whose sequence number and kind check out.
"""

from __future__ import annotations

import os

IMPLEMENTATION = "python"
C_UNAVAILABLE: str | None = "TUIMON_PURE_PYTHON=1"  # why the C path is not in use, if it is not

if os.environ.get("TUIMON_PURE_PYTHON") != "1":
    try:
        from ._fastring import (
            Phases,
            Range,
            RingWriter,
            bind,
            count,
            depth,
            depth_enter,
            set_depth,
            thread_id,
            unpack_records,
        )

        IMPLEMENTATION, C_UNAVAILABLE = "c", None
    except ImportError as e:
        C_UNAVAILABLE = f"the C extension was not built ({e})"

if IMPLEMENTATION == "python":
    from .phases_py import Phases  # noqa: F401
    from .ring_py import (  # noqa: F401
        Range,
        RingWriter,
        bind,
        count,
        depth,
        depth_enter,
        set_depth,
        thread_id,
        unpack_records,
    )
