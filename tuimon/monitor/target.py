"""From a PID on the command line to an open channel, or a message that says what is wrong."""

from __future__ import annotations

import os

from ..channel import (
    ChannelError,
    Found,
    NoSegment,
    SegmentReader,
    StaleSegment,
    find_segments,
    procinfo,
    segment_path,
)
from ..channel.discovery import segment_state
from ..channel.text import safe_text


def describe(pid: int) -> str:
    argv = procinfo.cmdline(pid)
    return f"PID {pid} ({safe_text(' '.join(argv), 80)})" if argv else f"PID {pid}"


def open_channel(pid: int) -> tuple[SegmentReader, str | None]:
    """The channel of pid, and None; or, for a launcher (torchrun, a shell: no channel or no RANK of
    its own), the channel of its lowest-ranked instrumented descendant and a sentence saying so.
    Raises ChannelError with a message for the person at the terminal."""
    if pid <= 0:
        raise ChannelError(f"{pid} is not a process ID")
    alive = procinfo.start_ticks(pid) is not None
    if pid == 1:  # every orphan is init's descendant: never pick an unrelated job for it
        path = find_segments(pid, descendants=False)
        if path:
            return SegmentReader(path[0].path), None
        raise NoSegment("PID 1 (init) has no tuimon channel, and tuimon does not search its descendants "
                        "(every orphaned process is one): attach to the training process's own PID")
    found = find_segments(pid)
    own = [f for f in found if f.relation == "target"]
    children = [f for f in found if f.relation == "descendant"]
    if own and own[0].state == "reused":
        if not children:
            raise StaleSegment(
                f"the channel for PID {pid} was left by an earlier process that had the same PID; "
                f"{describe(pid)} has no channel of its own"
            )
        own = []
    if own and own[0].state != "unreadable":
        reader = SegmentReader(own[0].path)
        if reader.info.meta.rank is None:  # a launcher (torchrun) is instrumented too:
            rank0 = _lowest_rank(children)        # the training is in its ranks
            if rank0 is not None:
                reader.close()
                return rank0, _why(pid, rank0, "its channel has no rank (a launcher)")
        return reader, None
    if children:
        reader = _lowest_rank(children) or SegmentReader(children[0].path)
        return reader, _why(pid, reader, "it has no channel")
    if own:
        return SegmentReader(own[0].path), None  # raises the reason it is unreadable
    if not alive:
        raise NoSegment(f"no process with PID {pid} (and no channel left by one)")
    if not os.access(f"/proc/{pid}/stat", os.R_OK):
        raise NoSegment(f"cannot see PID {pid}")
    parent = _instrumented_ancestor(pid)
    if parent is not None:  # a DataLoader worker (or another child) of an instrumented job: its loop is there
        reader, why = open_channel(parent)
        shown = f"its parent {describe(parent)}" if procinfo.parent(pid) == parent else f"its ancestor {describe(parent)}"
        said = f"PID {pid}: it has no channel (a DataLoader worker, or another child, of the process that runs the loop); showing {shown}"
        return reader, said if why is None else f"{said}; {why}"
    inside = procinfo.namespace_pid(pid)
    if inside is not None:
        raise NoSegment(
            f"{describe(pid)} runs in another PID namespace (a container), where it is PID {inside}; its probe "
            f"names its channel for PID {inside} in the container's /dev/shm: run `tuimon attach {inside}` inside "
            "the container"
        )
    raise NoSegment(
        f"{describe(pid)} has no tuimon channel: start it with `tuimon run -- <command>` "
        "(or `tuimon run --headless -- ...` to attach later), or call tuimon.instrument() in it"
    )


def _instrumented_ancestor(pid: int) -> int | None:
    """The nearest ancestor of pid (below init) whose own channel is alive, if any."""
    seen = {pid}
    ancestor = procinfo.parent(pid)
    while ancestor is not None and ancestor > 1 and ancestor not in seen:
        path = segment_path(ancestor)
        if os.path.exists(path) and segment_state(path) == "alive":
            return ancestor
        seen.add(ancestor)
        ancestor = procinfo.parent(ancestor)
    return None


def _why(pid: int, reader: SegmentReader, reason: str) -> str:
    rank = reader.info.meta.rank
    which = f"rank {rank} " if rank is not None else ""
    return f"PID {pid}: {reason}; showing its descendant {which}{describe(reader.info.pid)}"


def _lowest_rank(found: list[Found]) -> SegmentReader | None:
    """The reader of the descendant with the lowest RANK (rank 0 of a torchrun job), if any has one."""
    best = None
    for f in found:
        try:
            r = SegmentReader(f.path)
        except ChannelError:
            continue
        rank = r.info.meta.rank
        if rank is not None and (best is None or rank < best[0]):
            if best is not None:
                best[1].close()
            best = (rank, r)
        else:
            r.close()
    return best[1] if best else None
