"""Byte access to a segment: through its fd for monitors, through the writer's own mapping for the probe.

A monitor never maps a segment. Any process of the same user can truncate the file, and a read
through a mapping past the new end faults (SIGBUS), which kills the monitor whatever it catches;
the same read through pread comes back short and becomes a CorruptSegment the monitor can show.
Both views have the same two calls, so the control block is one code for both sides.
"""

from __future__ import annotations

import os

from .errors import CorruptSegment


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

    def __init__(self, buf, base: int = 0):
        self.buf, self.base = buf, base

    def read(self, off: int, n: int) -> bytes:
        at = self.base + off
        return bytes(self.buf[at : at + n])

    def write(self, off: int, data: bytes) -> None:
        at = self.base + off
        self.buf[at : at + len(data)] = data
