"""Which segments belong to a process and its descendants, and removing those nobody owns."""

from __future__ import annotations

import os
import time
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from . import layout as L
from . import procinfo
from .paths import parse_segment_name, segment_path, shm_dir

STALE_GRACE_S = 60.0  # a dead process's segment stays this long after its last sign of life


@dataclass(frozen=True)
class Found:
    pid: int
    path: str
    state: str  # 'alive' | 'exited' | 'reused' | 'unreadable'
    relation: str  # 'target' | 'descendant'


def _identity(path: str) -> tuple[int, int, int] | None:
    """(pid, start ticks, last sign of life in monotonic ns) from a segment's header, or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(L.OFF_RING_HEAD)
    except OSError:
        return None
    if len(head) < L.OFF_RING_HEAD or head[:8] != L.MAGIC:
        return None
    fields = L.HEADER.unpack_from(head, 0)
    pid, start, created = fields[11], fields[12], fields[13]
    closed = L.U64.unpack_from(head, L.OFF_CLOSED_NS)[0]
    beat = L.U64.unpack_from(head, L.OFF_HEARTBEAT_NS)[0]
    return pid, start, max(created, closed, beat)


def segment_state(path: str) -> str:
    ident = _identity(path)
    if ident is None:
        return "unreadable"
    return procinfo.process_state(ident[0], ident[1])


def list_segments(uid: int | None = None, directory: str | None = None) -> list[tuple[int, str]]:
    """(pid, path) of every segment of this user, sorted by pid."""
    uid = os.getuid() if uid is None else uid
    directory = directory or shm_dir()
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    out = []
    for name in names:
        parsed = parse_segment_name(name)
        if parsed and parsed[0] == uid:
            out.append((parsed[1], os.path.join(directory, name)))
    return sorted(out)


def find_segments(pid: int, directory: str | None = None, grace_s: float = STALE_GRACE_S,
                  descendants: bool = True) -> list[Found]:
    """The target's own segment (alive or not: a dead one is kept for a last look) and those of
    its live descendants (DataLoader workers have none; torchrun ranks do). Stale segments of
    other processes are removed on the way."""
    directory = directory or shm_dir()
    found: list[Found] = []
    own = segment_path(pid, directory=directory)
    if os.path.exists(own):
        found.append(Found(pid, own, segment_state(own), "target"))
    for child in procinfo.descendants(pid) if descendants else ():
        path = segment_path(child, directory=directory)
        if os.path.exists(path):
            state = segment_state(path)
            if state == "alive":
                found.append(Found(child, path, state, "descendant"))
    cleanup_stale(directory, keep={pid}, grace_s=grace_s)
    return found


def cleanup_stale(directory: str | None = None, keep: AbstractSet[int] = frozenset(),
                  grace_s: float = STALE_GRACE_S) -> list[str]:
    """Remove this user's segments whose process is gone: at once when the PID was reused,
    after grace_s of silence when the process exited. Returns the removed paths."""
    removed = []
    now = time.monotonic_ns()
    for pid, path in list_segments(directory=directory):
        if pid in keep:
            continue
        ident = _identity(path)
        if ident is None:
            if procinfo.start_ticks(pid) is not None:
                continue  # its writer may be starting right now
            state, last = "exited", 0
        else:
            state, last = procinfo.process_state(ident[0], ident[1]), ident[2]
        if state == "alive":
            continue
        if state == "exited" and (now - last) / 1e9 < grace_s:
            continue
        try:
            os.unlink(path)
            removed.append(path)
        except OSError:
            pass
    return removed
