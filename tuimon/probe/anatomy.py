"""Where the loop's time goes between two step boundaries, with no code change: exclusive time per
phase on the loop thread (data, forward, backward, optimizer, sync; the rest is "other"), the
device-to-host syncs of the step and where they are called from.

Phases nest (Lightning runs forward and backward inside optimizer.step(closure); a sync can sit
inside forward): time always goes to the innermost open phase, so the phases of a step add up to
exactly its duration (the same timestamps close one step and open the next). Only the loop
thread counts: the thread that steps (the main thread until a step says otherwise).

Hot path: enter/exit run per phase (a few per step), close once per step, both in C where it is
built (channel/_phases.c says why); sync runs per device-to-host sync (which itself costs ~10 us or
more); call sites are sampled so walking the stack costs at most SITE_WALKS per step, and at most one
walk per SITE_WALK_GAP_NS (a walk costs ~10 us where the step leaves the caches cold, measured right
after a real step: benchmarks/step_segments.py says why that matters). Nothing here raises into the
loop or imports torch."""

from __future__ import annotations

import functools
import os
import threading
from typing import TYPE_CHECKING, Any

from ..channel import layout as L
from ..channel.ring import Phases

if TYPE_CHECKING:
    from types import FrameType

PHASES = L.PHASES
# The phase ids as plain ints, bound from layout.Phase: the phase clock's pure-Python twin (phases_py.py) takes
# an exact int only (`type(phase) is int`, on every enter and exit), which an IntEnum member is not; _phases.c
# reads either (PyLong_AsLong); and ints compare faster (core.py's step sources say how much).
OTHER, DATA, FORWARD, BACKWARD, OPTIMIZER, SYNC, COMM, COPY = (int(p) for p in L.Phase)
SITE_WALKS = 16  # stack walks per step at most (each ~1-2 us warm, ~10 cold)
SITE_WALK_GAP_NS = 100_000_000  # and one per 100 ms at most: <= 10 a second (~0.1 ms of the loop's second),
#   ~100 in the monitor's 10 s window: a site's share known within ~5 points (binomial, n = 100)
_NS_MAX = (1 << 63) - 1  # a SITE record's wait (t0) is an int64
MAX_SITES = 256  # distinct call sites named; later ones count as "(other sites)"
_TUIMON = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_HERE = (os.path.join(_TUIMON, "probe"), os.path.join(_TUIMON, "channel"))  # the probe's own frames


class Anatomy(Phases):
    """The phase clock (channel.ring.Phases: C when built; enter, exit, move, close, top, acc, ...
    are its methods, called straight from the wrappers) and, in Python, what only syncs need: their
    spans for the GPU timing and their sampled call sites."""

    def __init__(self, ring: Any, intern: Any) -> None:
        super().__init__(ring, [intern(p) for p in PHASES], intern("sync.count"), SYNC, SITE_WALKS,
                         threading.main_thread().ident, SITE_WALK_GAP_NS)
        self._emit, self._intern = ring.emit, intern
        self.sync_spans: list[tuple[int, int]] = []  # this step's syncs (host ns), for the GPU timing (synced appends)
        self.sites: dict[int, int] = {}  # name id -> sampled syncs there, this step (a walk counts those it stands for)
        self.site_ns: dict[int, int] = {}  # name id -> the loop's wait there, this step (a walk: its own wait x weight)
        self._site_names: dict[tuple, int] = {}
        self._skip: tuple[str, ...] = _HERE  # frames inside these are not the call site (torch's dir added by hooks)

    def restart(self, t: int) -> None:
        """The step starts at t (the first step starts at its first batch): time before is dropped."""
        super().restart(t)
        self.sync_spans, self.sites, self.site_ns = [], {}, {}

    def sync(self, t0: int, t1: int, frame: FrameType | None, timed: bool = False) -> None:
        """The loop thread was blocked t0..t1 in a device-to-host sync; frame: the caller's. timed:
        the sync phase was entered and left around it (its time is given already)."""
        weight = self.synced(t0, t1, timed)
        if weight:
            self.walk(frame, weight, t1 - t0)

    def walk(self, frame: FrameType | None, weight: int, waited: int = 0) -> None:
        """Name the call site of a sync (frame: the caller's) that stands for `weight` syncs (synced)
        and waited `waited` ns itself: the site's wait is estimated as waited x weight.

        How good that is: synced walks a chosen sync with probability 1/every drawn per sync, not by
        time nor by site, and its weight is the chosen syncs since the last walk (about `every`, whatever
        the site), so each sync's own wait counts, in expectation, once: E[weight x wait] summed over a
        site's walks is its syncs' total wait (Horvitz-Thompson with the realised gap for 1/p), and a
        site waiting 30% of the step beside one waiting 15% at one call a step each gets 2:1, where the
        counts alone split the sync time evenly. Where it is not: the weight stands for syncs of other
        sites too (noise, not bias: ~5 points of the step per ~100 walks in a window); `every` moves
        each SITE_WALK_GAP_NS and a long wait more often crosses that boundary (a small bias when the
        sync rate changes); the period's countdown picks every period-th sync by count (period > 1 only
        past 2 x SITE_WALKS syncs a step): a loop whose sync pattern repeats with that period puts one
        site's waits on another's walks; the chosen syncs owed since the last walk at a window's end
        are not counted yet; and a wait is the host's (t0..t1 around the call), wrapper included."""
        nid = self._site(frame)
        self.sites[nid] = self.sites.get(nid, 0) + weight
        if waited > 0:
            self.site_ns[nid] = self.site_ns.get(nid, 0) + weight * waited

    def close_step(self, step: int, t0: int, t1: int, tid: int) -> list[tuple[int, int]]:
        """The step ran t0..t1: its STEP record, a PHASE record per phase it spent time in, its sync
        count and sampled call sites; the next step starts at t1 with the same phases open.
        Returns the step's sync spans."""
        spans = self.sync_spans
        period = self.close(step, t0, t1, tid)
        if spans:
            self.sync_spans = []
        if self.sites:
            waits = self.site_ns
            for nid, hits in self.sites.items():  # (t0: the wait, an int64 the ring takes: a float would disable it)
                ns = min(int(waits.get(nid, 0) * period), _NS_MAX)
                self._emit(L.SITE, 0, nid, tid, step, ns, t1, float(hits * period))
            self.sites, self.site_ns = {}, {}
        return spans

    def _site(self, frame: FrameType | None) -> int:
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


@functools.lru_cache(maxsize=4096)
def short_path(path: str) -> str:
    """A call site's file, short: an installed package's from the package (also in a virtual
    environment under the working directory), else relative to the working directory at its first
    naming (the control thread names the loop's line 5 times a second: relpath's getcwd and joins
    were half of that)."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    try:
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            return rel
    except (ValueError, OSError):  # (OSError: the working directory was deleted, and getcwd fails)
        pass
    parts = path.split(os.sep)
    return os.sep.join(parts[-2:])

