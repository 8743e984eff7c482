"""From a PID on the command line to an open channel, or a message that says what is wrong."""

from __future__ import annotations

import os

from ..channel import (
    ChannelError,
    NoSegment,
    SegmentReader,
    StaleSegment,
    find_segments,
    procinfo,
)
from ..channel.text import safe_text


def describe(pid: int) -> str:
    argv = procinfo.cmdline(pid)
    return f"PID {pid} ({safe_text(' '.join(argv), 80)})" if argv else f"PID {pid}"


def open_channel(pid: int) -> SegmentReader:
    """The channel of pid, or of its first instrumented descendant (a launcher such as torchrun
    or a shell). Raises ChannelError with a message for the person at the terminal."""
    if pid <= 0:
        raise ChannelError(f"{pid} is not a process ID")
    alive = procinfo.start_ticks(pid) is not None
    found = find_segments(pid)
    own = [f for f in found if f.relation == "target"]
    if own and own[0].state == "reused":
        if not [f for f in found if f.relation == "descendant"]:
            raise StaleSegment(
                f"the channel for PID {pid} was left by an earlier process that had the same PID; "
                f"{describe(pid)} has no channel of its own"
            )
        own = []
    if own and own[0].state != "unreadable":
        return SegmentReader(own[0].path)
    children = [f for f in found if f.relation == "descendant"]
    if children:
        return SegmentReader(children[0].path)
    if own:
        return SegmentReader(own[0].path)  # raises the reason it is unreadable
    if not alive:
        raise NoSegment(f"no process with PID {pid} (and no channel left by one)")
    if not os.access(f"/proc/{pid}/stat", os.R_OK):
        raise NoSegment(f"cannot see PID {pid}")
    raise NoSegment(
        f"{describe(pid)} has no tuimon channel: start it with `tuimon run -- <command>` "
        "(or `tuimon run --headless -- ...` to attach later), or call tuimon.instrument() in it"
    )
