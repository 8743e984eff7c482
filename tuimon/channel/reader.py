"""The reading side of a segment, used by monitors. Everything in the segment is untrusted.

Drain protocol (after Linux perf's mmap ring): read the writer's free-running counter, copy the
records between our tail and it, read the counter again; a record the writer may have overwritten
while we copied is discarded and counted as lost, never returned. Nothing here ever waits on the
writer, which may be dead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from . import layout as L
from . import procinfo
from .control import ControlBlock, End, Now, read_stacks
from .errors import CorruptSegment, IncompatibleSegment
from .fileview import FileView, open_own_segment
from .meta import JobMeta
from .paths import parse_segment_name
from .ring import unpack_records


@dataclass(frozen=True, kw_only=True)
class SegmentInfo:
    path: str
    pid: int
    uid: int
    start_ticks: int
    created_ns: int
    ring_records: int
    meta: JobMeta = field(default_factory=JobMeta)


@dataclass
class Batch:
    """What one drain found: records in write order, and what was lost since the last drain."""

    records: list[tuple]
    lost: int = 0  # overwritten before we could copy them (overrun), counted exactly
    corrupt: int = 0  # slots whose contents did not check out (never returned as data)


class SegmentReader:
    def __init__(self, path: str, expected_uid: int | None = None):
        self.path = path
        fd, st = open_own_segment(path, expected_uid=expected_uid)
        self._file = FileView(fd, path)  # read with pread, never mapped: see fileview
        self._size = st.st_size
        try:
            if st.st_size < L.HEADER_SIZE:
                raise CorruptSegment(f"{path} is truncated ({st.st_size} bytes, header needs {L.HEADER_SIZE})")
            self.info = self._validate(st.st_uid)
        except BaseException:
            self._file.close()
            raise
        self._cap = self.info.ring_records
        self._mask = self._cap - 1
        self.tail = 0  # next record index we have not consumed
        self.total_lost = 0
        self.total_corrupt = 0
        self._names: list[str] = []
        self._names_parsed = 0

    # -- header -------------------------------------------------------------------------------

    def _validate(self, file_uid: int) -> SegmentInfo:
        size, path = self._size, self.path
        header = self._file.read(0, L.HEADER_SIZE)
        magic = header[0:8]
        if magic != L.MAGIC:
            if magic == b"\0" * 8:
                raise CorruptSegment(f"{path} is not initialised (its writer is starting, or died starting)")
            raise CorruptSegment(f"{path} is not a tuimon channel segment (bad magic {magic!r})")
        (_, version, header_size, total, ctl_off, ctl_size, names_off, names_cap, ring_off, ring_n,
         rec_size, pid, start, created, meta_off, meta_len, uid) = L.HEADER.unpack_from(header, 0)
        if version != L.LAYOUT_VERSION:
            newer = "a newer" if version > L.LAYOUT_VERSION else "an older"
            raise IncompatibleSegment(
                f"{path} was written by {newer} tuimon (channel layout v{version}); this tuimon reads "
                f"layout v{L.LAYOUT_VERSION}: use the same tuimon version in the monitor and the job"
            )

        def bad(what: str) -> CorruptSegment:
            return CorruptSegment(f"{path} is corrupt: {what}")

        if header_size != L.HEADER_SIZE or rec_size != L.RECORD_SIZE:
            raise bad(f"header size {header_size} / record size {rec_size}")
        if total > size:
            raise bad(f"says {total} bytes but the file has {size}")
        if not L.valid_ring_records(ring_n):
            raise bad(f"ring of {ring_n} records")
        regions = sorted([(0, header_size), (ctl_off, ctl_size), (L.STACKS_OFFSET, L.STACKS_CAPACITY),
                          (names_off, names_cap), (ring_off, ring_n * rec_size)])
        end = 0
        for off, length in regions:
            if off < end or off + length > total:
                raise bad(f"region {off}+{length} overlaps or lies outside {total} bytes")
            end = off + length
        if (ctl_off, ctl_size, names_off, names_cap) != (L.CONTROL_OFFSET, L.CONTROL_SIZE,
                                                          L.NAMES_OFFSET, L.NAMES_CAPACITY):
            raise bad(f"control block or name table not where layout v{L.LAYOUT_VERSION} puts them")
        if ring_off != L.RING_OFFSET:
            raise bad(f"ring at {ring_off}")
        if uid != file_uid:
            raise bad(f"header uid {uid} but the file is owned by {file_uid}")
        named = parse_segment_name(os.path.basename(path))
        if named and named[1] != pid:
            raise bad(f"header pid {pid} but the file is named for pid {named[1]}")
        if not (L.META_OFFSET <= meta_off and meta_off + meta_len <= header_size):
            raise bad(f"metadata {meta_off}+{meta_len} outside the header")
        meta = JobMeta.decode(header[meta_off : meta_off + meta_len])
        return SegmentInfo(path=path, pid=pid, uid=uid, start_ticks=start, created_ns=created,
                           ring_records=ring_n, meta=meta)

    def _u64(self, off: int) -> int:
        return L.U64.unpack(self._file.read(off, 8))[0]

    @property
    def head(self) -> int:
        return self._u64(L.OFF_RING_HEAD)

    @property
    def steps(self) -> int:
        return self._u64(L.OFF_STEPS)

    @property
    def heartbeat_ns(self) -> int:
        return self._u64(L.OFF_HEARTBEAT_NS)

    @property
    def closed_ns(self) -> int:
        return self._u64(L.OFF_CLOSED_NS)

    @property
    def closed(self) -> bool:
        return bool(L.U32.unpack(self._file.read(L.OFF_FLAGS, 4))[0] & L.FLAG_CLOSED)

    def process_state(self) -> str:
        """'alive', 'exited' or 'reused' (the PID now belongs to another process)."""
        return procinfo.process_state(self.info.pid, self.info.start_ticks)

    # -- ring -----------------------------------------------------------------------------------

    @property
    def behind(self) -> int:
        """Records written and not drained yet (more than the ring holds: some are lost)."""
        return max(0, self.head - self.tail)

    def seek_recent(self, n: int) -> None:
        """Start reading n records before the newest (records older than the ring are gone)."""
        self.tail = max(0, self.head - n)

    def drain(self, limit: int | None = None) -> Batch:
        """The records written since the last drain, oldest first; with `limit`, at most that many
        (the oldest of them: drain again for the rest, see `behind`). A full ring is 64k records,
        ~20 MB as Python tuples at once; read in parts, they come and go in the same memory."""
        if limit is not None and limit < 1:
            raise ValueError(f"a drain reads at least one record (limit {limit})")
        data, tail, h1, lost = self._take(limit)
        records, corrupt = unpack_records(data, tail)
        self.tail = h1
        self.total_lost += lost
        self.total_corrupt += corrupt
        return Batch(records, lost, corrupt)

    def skim(self, keep_steps: int, kinds: frozenset[int]) -> tuple[Batch, int]:
        """A first read of a ring that has run a while: the records before the newest `keep_steps`
        steps' (up to and with the STEP record that ends the step before them) are passed over,
        those of `kinds` kept (a few: what the probe said once, step ends); the tail moves past
        them, so the next drain unpacks only the newest steps. Returns (the kept, records passed
        over); passes over nothing where the ring holds no more than keep_steps steps."""
        data, tail, _, lost = self._take(None)
        column = data[0 :: L.RECORD_SIZE]  # every record's kind, one byte each
        cut, step = len(column), bytes((L.STEP,))
        for _ in range(keep_steps + 1):
            cut = column.rfind(step, 0, cut)
            if cut < 0:
                return Batch([], 0, 0), 0
        at = sorted(i for kind in kinds for i in _find_all(column, bytes((kind,)), cut + 1))
        records = [L.RECORD.unpack_from(data, i * L.RECORD_SIZE) for i in at]
        good = [r for i, r in zip(at, records, strict=True) if r[9] == tail + i]
        self.tail = tail + cut + 1
        self.total_lost += lost
        self.total_corrupt += len(records) - len(good)
        return Batch(good, lost, len(records) - len(good)), cut + 1

    def _take(self, limit: int | None) -> tuple[bytes, int, int, int]:
        """(the records' bytes, the ring index of the first, the index after the last, records
        lost): what was written since the last read (at most `limit`), none the writer may have
        overwritten while it was copied."""
        if self._file.read(0, 8) != L.MAGIC:
            raise CorruptSegment(f"{self.path}: its header was overwritten while being read")
        cap = self._cap
        h1 = self.head
        tail = self.tail
        if h1 < tail:
            raise CorruptSegment(f"{self.path}: write counter went backwards ({tail} -> {h1})")
        lost = 0
        if h1 - tail > cap:
            lost = h1 - tail - cap
            tail = h1 - cap
        if limit is not None and h1 - tail > limit:
            h1 = tail + limit
        data = self._copy(tail, h1)
        h2 = self.head
        # While we copied, the writer may have written records h1..h2 (published) and be in the
        # middle of h2: those overwrite indices up to h2 - cap. Nothing older is trustworthy.
        first_valid = max(tail, h2 - cap + 1)
        if first_valid > tail:
            skip = min(first_valid, h1) - tail
            lost += skip
            data = data[skip * L.RECORD_SIZE :]
            tail += skip
        return data, tail, h1, lost

    def _copy(self, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        base, size, read = L.RING_OFFSET, L.RECORD_SIZE, self._file.read
        a, b = start & self._mask, end & self._mask
        if a < b:
            return read(base + a * size, (b - a) * size)
        # wrapped (a == b: exactly one whole ring)
        return read(base + a * size, (self._cap - a) * size) + read(base, b * size)

    # -- names ----------------------------------------------------------------------------------

    def name(self, name_id: int) -> str:
        if 0 < name_id <= len(self._names):
            return self._names[name_id - 1]
        self._refresh_names()
        if 0 < name_id <= len(self._names):
            return self._names[name_id - 1]
        return "(unnamed)" if name_id == 0 else f"(name #{name_id})"

    def _refresh_names(self) -> None:
        used = min(self._u64(L.OFF_NAMES_USED), L.NAMES_CAPACITY)
        start = at = self._names_parsed
        hdr = L.NAME_LEN.size
        new = self._file.read(L.NAMES_OFFSET + start, used - start) if used > start else b""
        while at + hdr <= used:
            (n,) = L.NAME_LEN.unpack_from(new, at - start)
            if n > L.MAX_NAME_BYTES or at + hdr + n > used:
                break  # corrupt entry: names from here on stay unknown
            raw = new[at - start + hdr : at - start + hdr + n]
            self._names.append(raw.decode("utf-8", "replace"))  # (length-limited by the writer)
            at += hdr + n
        self._names_parsed = at

    # -- the present: what the loop does now, how the job ended, its threads' stacks -----------

    def _control(self) -> ControlBlock:
        return ControlBlock(FileView(self._file.fd, self.path, L.CONTROL_OFFSET))  # (the reader's fd)

    def now(self) -> Now | None:
        return self._control().read_now()

    def end(self) -> End:
        return self._control().read_end()

    def exit_code(self) -> int | None:
        """The exit code the process said at its end, or minus its signal (None: not said)."""
        return self._control().read_exit()

    def stacks(self) -> tuple[int, int, str] | None:
        """(request answered, when written, text) of the last stacks the probe wrote, if any."""
        return read_stacks(FileView(self._file.fd, self.path, L.STACKS_OFFSET))

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> SegmentReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()



def _find_all(column: bytes, kind: bytes, end: int) -> list[int]:
    """The positions of `kind` in column[:end] (bytes.find: a C scan between hits)."""
    out, at = [], column.find(kind, 0, end)
    while at >= 0:
        out.append(at)
        at = column.find(kind, at + 1, end)
    return out
