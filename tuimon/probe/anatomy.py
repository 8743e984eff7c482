"""Where the loop's time goes between two step boundaries, with no code change: exclusive time per
phase on the loop thread (data, forward, backward, optimizer, sync; the rest is "other"), the
device-to-host syncs of the step and where they are called from.

Phases nest (Lightning runs forward and backward inside optimizer.step(closure); a sync can sit
inside forward): time always goes to the innermost open phase, so the phases of a step add up to
exactly its duration (the same timestamps close one step and open the next). Only the loop
thread counts: the thread that steps (the main thread until a step says otherwise).

Hot path: enter/exit run per phase (a few per step) and sync per device-to-host sync (which itself
costs ~10 us or more); call sites are sampled so walking the stack costs at most SITE_WALKS per
step. Nothing here raises into the loop or imports torch."""

from __future__ import annotations

import os
import sys
import threading
from time import monotonic_ns as _now

from ..channel import layout as L

PHASES = ("other", "data", "forward", "backward", "optimizer", "sync", "comm")
OTHER, DATA, FORWARD, BACKWARD, OPTIMIZER, SYNC, COMM = range(len(PHASES))
SITE_WALKS = 16  # stack walks per step at most (each ~1-2 us)
MAX_SITES = 256  # distinct call sites named; later ones count as "(other sites)"
_TUIMON = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_HERE = (os.path.join(_TUIMON, "probe"), os.path.join(_TUIMON, "channel"))  # the probe's own frames


class Anatomy:
    def __init__(self, emit, intern, tid_of_record):
        self._emit, self._intern, self._tid = emit, intern, tid_of_record
        self.loop = threading.main_thread().ident
        self.stack = [OTHER]
        self.t = _now()
        self.acc = [0] * len(PHASES)
        self.syncs = 0
        self.sync_spans: list[tuple[int, int]] = []  # this step's syncs (host ns), for the GPU timing
        self.sites: dict[int, int] = {}  # name id -> sampled syncs there, this step
        self.period = 1  # walk the stack on every period-th sync
        self._countdown = 1
        self._site_names: dict[tuple, int] = {}
        self._skip = _HERE  # frames inside these are not the call site (torch's dir added by hooks)
        self._ids = None  # phase name ids, interned on first use

    def restart(self, t: int) -> None:
        """The step starts at t (the first step starts at its first batch): time before is dropped."""
        self.acc = [0] * len(PHASES)
        self.syncs, self.sync_spans, self.sites = 0, [], {}
        self.t = t

    def on_loop(self) -> bool:
        return threading.get_ident() == self.loop

    def enter(self, phase: int, t: int | None = None) -> None:
        if threading.get_ident() != self.loop:
            return
        t = _now() if t is None else t
        self.acc[self.stack[-1]] += t - self.t
        self.t = t
        self.stack.append(phase)

    def exit(self, phase: int, t: int | None = None) -> None:
        if threading.get_ident() != self.loop:
            return
        t = _now() if t is None else t
        st = self.stack
        self.acc[st[-1]] += t - self.t
        self.t = t
        if st[-1] == phase:
            st.pop()
        else:  # unbalanced (an exception skipped an exit): drop the innermost entry of that phase
            for k in range(len(st) - 1, 0, -1):
                if st[k] == phase:
                    del st[k]
                    break

    def move(self, inner: int, phase: int, t0: int, t1: int) -> None:
        """t0..t1, at the end of the open innermost phase `inner`, was `phase` (known only
        afterwards: the wait for DDP's reduction at the end of backward)."""
        if threading.get_ident() != self.loop or self.stack[-1] != inner or not self.t <= t0 <= t1:
            return
        self.acc[inner] += t0 - self.t
        self.acc[phase] += t1 - t0
        self.t = t1

    def sync(self, t0: int, t1: int, frame) -> None:
        """The loop thread was blocked t0..t1 in a device-to-host sync; frame: the caller's."""
        self.acc[self.stack[-1]] += t0 - self.t
        self.acc[SYNC] += t1 - t0
        self.t = t1
        self.syncs += 1
        self.sync_spans.append((t0, t1))
        self._countdown -= 1
        if self._countdown <= 0:
            self._countdown = self.period
            nid = self._site(frame)
            self.sites[nid] = self.sites.get(nid, 0) + 1

    def _site(self, frame) -> int:
        """The name id of the first frame outside torch and tuimon: where the user's code synced."""
        f = frame
        while f is not None and f.f_code.co_filename.startswith(self._skip):
            f = f.f_back
        key = (f.f_code.co_filename, f.f_lineno) if f is not None else ("?", 0)
        nid = self._site_names.get(key)
        if nid is None:
            name = f"{short_path(key[0])}:{key[1]}" if len(self._site_names) < MAX_SITES else "(other sites)"
            nid = self._site_names[key] = self._intern(name)
        return nid

    def skip_frames_in(self, directory: str) -> None:
        self._skip = (*self._skip, directory)

    def close(self, step: int, t1: int) -> None:
        """The step ends at t1: one PHASE record per phase it spent time in, its sync count and
        sampled call sites; the next step starts at t1 with the same phases open."""
        if self._ids is None:
            self._ids = [self._intern(p) for p in PHASES]
        self.acc[self.stack[-1]] += t1 - self.t
        self.t = t1
        tid = self._tid()
        emit = self._emit
        for phase, ns in enumerate(self.acc):
            if ns > 0:
                emit(L.PHASE, 0, self._ids[phase], tid, step, 0, t1, float(ns))
        if self.syncs:
            emit(L.STEP_VALUE, 0, self._intern("sync.count"), tid, step, 0, t1, float(self.syncs))
            for nid, hits in self.sites.items():
                emit(L.SITE, 0, nid, tid, step, 0, t1, float(hits * self.period))
        # walk the stack at most SITE_WALKS times per step, given this step's syncs
        self.period = max(1, self.syncs // SITE_WALKS)
        self._countdown = min(self._countdown, self.period)
        self.acc = [0] * len(PHASES)
        self.syncs, self.sync_spans, self.sites = 0, [], {}


def short_path(path: str) -> str:
    """A call site's file, short: relative to the working directory, else from the package."""
    try:
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            return rel
    except ValueError:
        pass
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    parts = path.split(os.sep)
    return os.sep.join(parts[-2:])


def caller(depth: int = 2):
    """The frame `depth` levels above the caller of this function."""
    try:
        return sys._getframe(depth + 1)
    except ValueError:
        return None
