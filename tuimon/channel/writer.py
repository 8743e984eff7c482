"""The writing side of a segment, used by the probe inside the training process.

Rules: the writer never waits for a reader, never reads anything a reader wrote except the control
block, and never raises into the training loop once the segment exists: a failure disables it.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
import time

from . import layout as L
from . import procinfo
from .errors import ChannelError
from .meta import JobMeta
from .paths import segment_path, shm_dir
from .ring import RingWriter


def truncate_name(name: str) -> bytes:
    """UTF-8 bytes of name, cut to MAX_NAME_BYTES at a character boundary."""
    raw = name.encode("utf-8", "replace")
    if len(raw) <= L.MAX_NAME_BYTES:
        return raw
    return raw[: L.MAX_NAME_BYTES].decode("utf-8", "ignore").encode("utf-8")


class SegmentWriter:
    """One process's segment. Thread-safe. Records go through a RingWriter (ring.py: C when built,
    else Python); the name table is appended under a lock only this process's threads hold."""

    def __init__(self, path: str, fd: int, mm: mmap.mmap, ring_records: int):
        self.path = path
        self._fd = fd
        self._mm = mm
        self.ring = RingWriter(mm, L.RING_OFFSET, ring_records, L.OFF_RING_HEAD, L.OFF_STEPS, L.OFF_HEARTBEAT_NS)
        self.emit = self.ring.emit  # emit(kind, depth, name_id, tid, step, t0, t1, value=0.0)
        self.names: dict[str, int] = {}
        self.names_used = 0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.ring.enabled

    @property
    def error(self) -> str | None:
        return self.ring.error

    @classmethod
    def create(
        cls,
        meta: JobMeta | None = None,
        ring_records: int = L.DEFAULT_RING_RECORDS,
        directory: str | None = None,
    ) -> SegmentWriter:
        """Create this process's segment (replacing a stale one of an earlier process with the
        same PID). Raises ChannelError with a readable reason; nothing is left behind on failure."""
        if not L.valid_ring_records(ring_records):
            raise ChannelError(f"ring size {ring_records} is not a power of two in range")
        pid, uid = os.getpid(), os.getuid()
        directory = directory or shm_dir()
        path = segment_path(pid, uid, directory)
        size = L.segment_size(ring_records)
        try:
            os.unlink(path)  # our PID, so any existing segment is an earlier process's
        except FileNotFoundError:
            pass
        except OSError as e:
            raise ChannelError(f"cannot replace stale segment {path}: {e.strerror}") from e
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as e:
            raise ChannelError(f"cannot create {path}: {e.strerror}") from e
        try:
            os.fchmod(fd, 0o600)
            # Reserve the pages now: on a full tmpfs a sparse file would SIGBUS the training
            # process at its first write instead of failing here.
            os.posix_fallocate(fd, 0, size)
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as e:
            os.close(fd)
            _unlink_quietly(path)
            if e.errno == errno.ENOSPC:
                raise ChannelError(
                    f"no space left in {directory} for the {size // 1024} KiB channel segment"
                ) from e
            raise ChannelError(f"cannot set up {path}: {e.strerror}") from e
        meta_bytes = (meta or JobMeta()).encode(L.META_CAPACITY)  # (cuts argv first to fit)
        L.HEADER.pack_into(
            mm,
            0,
            b"\0" * 8,  # the magic goes in last: a reader never trusts a half-made segment
            L.LAYOUT_VERSION,
            L.HEADER_SIZE,
            size,
            L.CONTROL_OFFSET,
            L.CONTROL_SIZE,
            L.NAMES_OFFSET,
            L.NAMES_CAPACITY,
            L.RING_OFFSET,
            ring_records,
            L.RECORD_SIZE,
            pid,
            procinfo.start_ticks(pid) or 0,
            time.monotonic_ns(),
            L.META_OFFSET,
            len(meta_bytes),
            uid,
        )
        mm[L.META_OFFSET : L.META_OFFSET + len(meta_bytes)] = meta_bytes
        mm[0:8] = L.MAGIC
        return cls(path, fd, mm, ring_records)

    # -- names --------------------------------------------------------------------------------

    def intern(self, name: str) -> int:
        """The name's id in the table (1-based); 0 when the table is full."""
        nid = self.names.get(name)
        if nid is not None:
            return nid
        try:
            with self._lock:
                nid = self.names.get(name)
                if nid is not None:
                    return nid
                raw = truncate_name(name)
                end = self.names_used + L.NAME_LEN.size + len(raw)
                if end > L.NAMES_CAPACITY:
                    self.names[name] = 0
                    return 0
                at = L.NAMES_OFFSET + self.names_used
                L.NAME_LEN.pack_into(self._mm, at, len(raw))
                self._mm[at + L.NAME_LEN.size : at + L.NAME_LEN.size + len(raw)] = raw
                self.names_used = end
                nid = len(self.names) + 1
                L.U64.pack_into(self._mm, L.OFF_NAMES_USED, end)
                L.U64.pack_into(self._mm, L.OFF_NAME_COUNT, nid)
                self.names[name] = nid
                return nid
        except Exception as e:  # noqa: BLE001
            self._fail(e)
            return 0

    # -- occasional ---------------------------------------------------------------------------

    def set_steps(self, steps: int, now_ns: int) -> None:
        self.ring.publish_steps(steps, now_ns)  # (the probe's step boundary does it in Phases.close)

    def heartbeat(self, now_ns: int) -> None:
        if self.enabled:
            try:
                L.U64.pack_into(self._mm, L.OFF_HEARTBEAT_NS, now_ns)
            except Exception as e:  # noqa: BLE001
                self._fail(e)

    @property
    def records_written(self) -> int:
        return self.ring.head

    def mark_closed(self) -> None:
        """The process is exiting cleanly: say so, keep the segment for a last look."""
        if self.enabled:
            try:
                L.U64.pack_into(self._mm, L.OFF_CLOSED_NS, time.monotonic_ns())
                L.U32.pack_into(self._mm, L.OFF_FLAGS, L.FLAG_CLOSED)
            except Exception as e:  # noqa: BLE001
                self._fail(e)

    def detach(self) -> None:
        """Stop writing without touching the segment (a forked child shares the parent's
        mapping: it must neither write into it nor unmap it)."""
        self.ring.disable(None)
        self._lock = threading.Lock()  # the parent's may have been held at fork

    def unlink(self) -> None:
        _unlink_quietly(self.path)

    def _fail(self, e: Exception) -> None:
        """Stop writing, and keep the reason for `tuimon.status()`."""
        self.ring.disable(f"{type(e).__name__}: {e}")


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
