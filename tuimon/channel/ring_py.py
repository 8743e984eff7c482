"""The pure-Python ring writer and range: what ring.py uses when the C extension is missing
(or TUIMON_PURE_PYTHON=1). Same interface and behaviour as _fastring.c; ring.py documents it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from time import monotonic_ns as _now
from typing import TYPE_CHECKING, Any, Literal, overload

from . import layout as L

if TYPE_CHECKING:
    import mmap
    from types import TracebackType

_tls = threading.local()


class _Thread:
    __slots__ = ("depth", "tid")

    def __init__(self) -> None:
        self.depth = 0
        self.tid = threading.get_native_id() & 0xFFFFFFFF


def _thread() -> _Thread:
    try:
        return _tls.t
    except AttributeError:
        _tls.t = t = _Thread()
        return t


def thread_id() -> int:
    return _thread().tid


def depth_enter() -> int:
    t = _thread()
    d = t.depth
    t.depth = d + 1
    return d


def depth() -> int:
    return _thread().depth


def set_depth(d: int) -> None:
    _thread().depth = d


class RingWriter:
    """Records go in under a lock that only this process's threads ever hold (no I/O inside);
    the head is published after the record."""

    def __init__(self, buffer: mmap.mmap | bytearray, ring_offset: int, ring_records: int, head_offset: int, steps_offset: int,
                 heartbeat_offset: int = -1):
        if ring_records <= 0 or ring_records & (ring_records - 1):
            raise ValueError("ring_records must be a power of two")
        self._mm = buffer
        self._ring = ring_offset
        self._mask = ring_records - 1
        self._head_view = memoryview(buffer)[head_offset : head_offset + 8].cast("Q")
        self._steps_view = memoryview(buffer)[steps_offset : steps_offset + 8].cast("Q")
        self._heartbeat_view = None if heartbeat_offset == -1 else \
            memoryview(buffer)[heartbeat_offset : heartbeat_offset + 8].cast("Q")
        self.head = self._head_view[0]
        self._lock = threading.Lock()
        self._pack = L.RECORD.pack_into
        self.enabled = True
        self.error: str | None = None

    def emit(self, kind: int, depth: int, name_id: int, tid: int, step: int, t0: int, t1: int,
             value: float = 0.0) -> None:
        if self.enabled:
            try:
                with self._lock:
                    h = self.head
                    self._pack(self._mm, self._ring + (h & self._mask) * 48, kind,
                               depth if depth < 255 else 255, 0, name_id, tid, step, t0, t1, value, h)
                    self.head = h = h + 1
                    self._head_view[0] = h  # after the record (x86-64 keeps store order)
            except Exception as e:  # noqa: BLE001 - must never reach the training loop
                self.disable(f"{type(e).__name__}: {e}")

    def publish_steps(self, steps: int, now_ns: int) -> None:
        if self.enabled:
            try:
                self._steps_view[0] = steps
                if self._heartbeat_view is not None:
                    self._heartbeat_view[0] = now_ns
            except Exception as e:  # noqa: BLE001 - must never reach the training loop
                self.disable(f"{type(e).__name__}: {e}")

    def current_step(self) -> int:
        return self._steps_view[0] + 1

    def disable(self, reason: str | None) -> None:
        self.enabled = False
        self._lock = threading.Lock()  # after a fork the parent's may have been held
        if reason is not None:
            self.error = reason


class _Binding:
    __slots__ = ("ring", "names", "intern", "push", "pop", "count")

    def __init__(self, ring: RingWriter, names: dict[str, int], intern: Callable[[str], int],
                 push: Callable[[str], object] | None, pop: Callable[[], object] | None,
                 count: Callable[[str, float], object] | None):
        self.ring, self.names, self.intern, self.push, self.pop = ring, names, intern, push, pop
        self.count = count


_bound: _Binding | None = None


@overload
def bind(ring: None) -> None: ...


@overload
def bind(ring: RingWriter, names: dict[str, int], intern: Callable[[str], int],
         nvtx_push: Callable[[str], object] | None = None, nvtx_pop: Callable[[], object] | None = None,
         count: Callable[[str, float], object] | None = None) -> None: ...


def bind(ring: RingWriter | None, names: Any = None, intern: Any = None, nvtx_push: Callable[[str], object] | None = None,
         nvtx_pop: Callable[[], object] | None = None, count: Callable[[str, float], object] | None = None) -> None:
    """names and intern come with a ring (the overloads above; _fastring's bind checks it)."""
    global _bound
    _bound = None if ring is None else _Binding(ring, names, intern, nvtx_push, nvtx_pop, count)


def count(name: str, n: float = 1) -> None:
    """A COUNT record of n under name in the bound ring (nothing when none is bound): a str name and
    an int or float n here; anything else goes to the bound Python count (as in _fastring.c)."""
    b = _bound
    if b is None:
        return
    if type(name) is not str or type(n) not in (int, float):
        if b.count is not None:
            b.count(name, n)
        return
    try:
        value = float(n)
    except OverflowError:
        if b.count is not None:
            b.count(name, n)
        return
    if not b.ring.enabled:
        return
    t = _now()
    nid = b.names.get(name)
    if nid is None:
        nid = b.intern(name)
    b.ring.emit(L.COUNT, _thread().depth, nid, thread_id(), b.ring.current_step(), t, t, value)


class Range:
    __slots__ = ("name", "_b", "_t0", "_depth", "_th")

    def __init__(self, name: object):
        if type(name) is not str:
            try:
                name = str(name)
            except Exception:  # noqa: BLE001 - not worth an exception in the training loop
                name = "(unprintable name)"
        self.name = name
        self._b: _Binding | None = None

    def __enter__(self) -> Range:
        b = _bound
        if b is not None and b.ring.enabled:
            self._b = b
            th = self._th = _thread()
            self._depth = th.depth
            th.depth += 1
            if b.push is not None:
                try:
                    b.push(self.name)
                except Exception:  # noqa: BLE001 - a failing NVTX never reaches the loop
                    pass
            self._t0 = _now()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        b = self._b
        if b is None:
            return False
        t1 = _now()
        self._b = None
        th = self._th
        th.depth = d = self._depth
        if b is _bound:  # still the same probe (not re-bound or forked meanwhile)
            if b.pop is not None:
                try:
                    b.pop()
                except Exception:  # noqa: BLE001
                    pass
            nid = b.names.get(self.name)
            if nid is None:
                nid = b.intern(self.name)
            b.ring.emit(1, d, nid, th.tid, b.ring.current_step(), self._t0, t1, 0.0)  # 1: layout.RANGE
        return False


_KIND_BYTES = bytes(L.KINDS)
_SEQ_WORD, _WORDS = 40 // 8, L.RECORD_SIZE // 8  # the sequence number is a record's 6th u64


def unpack_records(data: bytes, first_seq: int) -> tuple[list, int]:
    """(records, corrupt): the layout.RECORD tuples of data whose sequence number is their
    position (first_seq, first_seq + 1, ...) and whose kind is known; the rest are counted."""
    records = list(L.RECORD.iter_unpack(data))
    if not records or _all_in_order(data, first_seq):
        return records, 0
    good = [r for i, r in enumerate(records) if r[9] == first_seq + i and r[0] in L.KINDS]
    return good, len(records) - len(good)


def _all_in_order(data: bytes, first_seq: int) -> bool:
    """The common case, checked a column at a time (C loops) rather than record by record. Native
    u64 order is the layout's little-endian on every host tuimon supports (x86-64, aarch64)."""
    seqs = memoryview(data).cast("Q")[_SEQ_WORD::_WORDS].tolist()
    return seqs == list(range(first_seq, first_seq + len(seqs))) and \
        not data[0::L.RECORD_SIZE].translate(None, _KIND_BYTES)

