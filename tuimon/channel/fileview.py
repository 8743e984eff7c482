"""Byte access to a segment: through its fd for monitors, through the writer's own mapping for the probe.

A monitor never maps a segment. Any process of the same user can truncate the file, and a read
through a mapping past the new end faults (SIGBUS), which kills the monitor whatever it catches;
the same read through pread comes back short and becomes a CorruptSegment the monitor can show.
Both views have the same two calls, so the control block is one code for both sides.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Protocol

from .errors import ChannelError, CorruptSegment, ForeignSegment, NoSegment

if TYPE_CHECKING:
    import mmap


class View(Protocol):
    """The two calls both views have (the control block and the stacks region go through them)."""

    def read(self, off: int, n: int) -> bytes: ...

    def write(self, off: int, data: bytes) -> None: ...


class FileView:
    """pread/pwrite on an fd this view owns, offsets from `base`."""

    def __init__(self, fd: int, path: str, base: int = 0):
        self.fd, self.path, self.base = fd, path, base

    def read(self, off: int, n: int) -> bytes:
        at = self.base + off
        data = os.pread(self.fd, n, at)
        if len(data) < n:
            raise CorruptSegment(f"{self.path} shrank while being read (needs {at + n} bytes)")
        return data

    def write(self, off: int, data: bytes) -> None:
        os.pwrite(self.fd, data, self.base + off)

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def close(self) -> None:
        os.close(self.fd)


class MappedView:
    """The writer's own mapping (the probe's side: its file is reserved and it never reads past it)."""

    def __init__(self, buf: mmap.mmap | bytearray, base: int = 0):
        self.buf, self.base = buf, base

    def read(self, off: int, n: int) -> bytes:
        at = self.base + off
        return bytes(self.buf[at : at + n])

    def write(self, off: int, data: bytes) -> None:
        at = self.base + off
        self.buf[at : at + len(data)] = data


def open_own_segment(path: str, writable: bool = False, expected_uid: int | None = None) -> tuple[int, os.stat_result]:
    """An fd on a segment file that is a regular file owned by expected_uid (default: us);
    ChannelError otherwise. The caller closes the fd."""
    expected_uid = os.getuid() if expected_uid is None else expected_uid
    try:
        fd = os.open(path, (os.O_RDWR if writable else os.O_RDONLY) | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError as e:
        raise NoSegment(f"no channel segment at {path}") from e
    except OSError as e:
        raise ChannelError(f"cannot open {path}: {e.strerror}") from e
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != expected_uid:
        os.close(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CorruptSegment(f"{path} is not a regular file")
        raise ForeignSegment(
            f"{path} belongs to uid {st.st_uid}, not to you (uid {expected_uid}): "
            "tuimon reads only your own processes' channels; run it as that user"
        )
    return fd, st
