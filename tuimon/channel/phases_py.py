"""The step's phase clock in Python: what ring.py uses when the C extension is missing (or
TUIMON_PURE_PYTHON=1). Same interface and behaviour as _phases.c, which says what it is for."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from time import monotonic_ns as _now

from . import layout as L
from . import ring_py

_MASK = (1 << 64) - 1  # (the xorshift64 draw of synced, as _phases.c makes it with a uint64_t)

MAX_NEST = 64  # open phases tracked (as in _phases.c); deeper ones are counted


class Phases:
    def __init__(self, ring: ring_py.RingWriter, ids: Iterable[int], sync_count_id: int, sync_phase: int, walks: int, loop: int, walk_gap: int = 0):
        ids = list(ids)
        if not 1 <= len(ids) <= 16 or not 0 <= sync_phase < len(ids) or walks < 1:
            raise ValueError("1..16 phases, sync_phase among them, walks >= 1")
        self._ring, self._ids, self._sync_count_id = ring, ids, sync_count_id
        self._sync_phase, self._walks, self.loop = sync_phase, walks, loop
        self._n = len(ids)
        self._stack = [0]
        self._untracked = 0
        self.t = self.since = _now()
        self._acc = [0] * self._n
        self.syncs = 0
        self.period = self._countdown = 1
        self._walk_gap, self._owed = walk_gap, 0
        self._window_at, self._window_chosen, self._every, self._rng = -(1 << 62), 0, 1, 0x9E3779B97F4A7C15
        self.sync_spans: list[tuple[int, int]] = []

    @property
    def top(self) -> int:
        return self._stack[-1]

    @property
    def open(self) -> list[int]:
        return list(self._stack)

    @property
    def acc(self) -> list[int]:
        return list(self._acc)

    def on_loop(self) -> bool:
        return threading.get_ident() == self.loop

    def _ok(self, phase: int, t: int | None = None) -> bool:
        return type(phase) is int and 0 <= phase < self._n and (t is None or type(t) is int)

    def enter(self, phase: int, t: int | None = None) -> None:
        if threading.get_ident() != self.loop or not self._ok(phase, t):
            return
        t = _now() if t is None else t
        self._acc[self._stack[-1]] += t - self.t
        self.t = t
        if len(self._stack) < MAX_NEST:
            self._stack.append(phase)
            self.since = t
        else:
            self._untracked += 1

    def exit(self, phase: int, t: int | None = None) -> None:
        if threading.get_ident() != self.loop or not self._ok(phase, t):
            return
        t = _now() if t is None else t
        st = self._stack
        self._acc[st[-1]] += t - self.t
        self.t = t
        if self._untracked:
            self._untracked -= 1
        elif len(st) > 1 and st[-1] == phase:
            st.pop()
            self.since = t
        else:  # unbalanced (an exception skipped an exit): drop the innermost entry of that phase
            for k in range(len(st) - 1, 0, -1):
                if st[k] == phase:
                    del st[k]
                    break

    def move(self, inner: int, phase: int, t0: int, t1: int) -> None:
        if (threading.get_ident() != self.loop or not self._ok(inner) or not self._ok(phase)
                or self._stack[-1] != inner or self._untracked or not self.t <= t0 <= t1):
            return
        self._acc[inner] += t0 - self.t
        self._acc[phase] += t1 - t0
        self.t = t1

    def data_wait(self, phase: int, t0: int, t1: int) -> None:
        self.exit(phase, t1)
        if self._ring.enabled:
            self._ring.emit(L.DATA_WAIT, ring_py.depth(), 0, ring_py.thread_id(), self._ring.current_step(), t0, t1,
                            0.0)

    def synced(self, t0: int, t1: int | None = None, timed: bool = False) -> int:
        t1 = _now() if t1 is None else t1
        if timed and threading.get_ident() == self.loop:
            self.exit(self._sync_phase, t1)
        chosen = self.count_sync(t1, t1) if timed else self.count_sync(t0, t1)
        if isinstance(self.sync_spans, list):
            self.sync_spans.append((t0, t1))
        if not chosen:
            return 0
        # (walked with probability 1/every, drawn per sync: _phases.c's synced says why)
        if t1 - self._window_at >= self._walk_gap:
            self._every, self._window_at, self._window_chosen = max(1, self._window_chosen), t1, 0
        self._window_chosen += 1
        x = self._rng
        x ^= (x << 13) & _MASK
        x ^= x >> 7
        x ^= (x << 17) & _MASK
        self._rng = x
        if x % self._every:
            self._owed += 1
            return 0
        weight, self._owed = 1 + self._owed, 0
        return weight

    def count_sync(self, t0: int, t1: int) -> bool:
        self._acc[self._stack[-1]] += t0 - self.t
        self._acc[self._sync_phase] += t1 - t0
        self.t = t1
        self.syncs += 1
        self._countdown -= 1
        if self._countdown <= 0:
            self._countdown = self.period
            return True
        return False

    def close(self, step: int, t0: int, t1: int, tid: int) -> int:
        period = self.period
        self._acc[self._stack[-1]] += t1 - self.t
        self.t = t1
        ring, emit = self._ring, self._ring.emit
        if ring.enabled:
            emit(L.STEP, 0, 0, tid, step, t0, t1, 0.0)
            for k, ns in enumerate(self._acc):
                if ns > 0:
                    emit(L.PHASE, 0, self._ids[k], tid, step, 0, t1, float(ns))
            if self.syncs:
                emit(L.STEP_VALUE, 0, self._sync_count_id, tid, step, 0, t1, float(self.syncs))
            ring.publish_steps(step, t1)
        self.period = max(1, self.syncs // self._walks)
        self._countdown = min(self._countdown, self.period)
        self._acc = [0] * self._n
        self.syncs = 0
        return period

    def restart(self, t: int) -> None:
        self._acc = [0] * self._n
        self.syncs = 0
        self.t = t
        if len(self._stack) == 1:
            self.since = t

    def reset(self, loop: int) -> None:
        self.loop = loop
        self._stack = [0]
        self._untracked = 0
        self.since = _now()
