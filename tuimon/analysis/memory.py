"""The loop's GPU memory, from the caching allocator's gauges the probe reads every ~0.5 s on its
control thread (probe/core.py): the latest numbers, the allocator's retries per step over the step
window, how full the memory is, how fast the live tensors grow and when they reach the cap at that
rate, and what an out-of-memory error's message says. Pure."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

from ..model import Memory, MemoryGrowth
from . import thresholds as T

GIB = 2**30


def memory(gauges: dict[int, float], history: Mapping[int, Iterable[tuple[int, int, float]]],
           name_of: Callable[[int], str], first_step: int = 0, last_step: int = 0) -> Memory | None:
    """gauges: name id -> latest value; history: name id -> (t, step, value), oldest first;
    first_step..last_step: the step window (0: none), over which the retries are counted."""
    ids = {name_of(k): k for k in gauges}
    if "cuda.allocated" not in ids:
        return None

    def get(name: str) -> int | None:
        k = ids.get(name)
        return int(gauges[k]) if k is not None else None

    def rise(name: str) -> tuple[float | None, int, int]:
        k = ids.get(name)
        return increase(history.get(k, ()), first_step, last_step) if k is not None and first_step else (None, 0, 0)

    retries, a, b = rise("cuda.alloc_retries")
    ooms, _, _ = rise("cuda.ooms")
    expandable = get("cuda.expandable_segments")
    peak = ids.get("cuda.peak_allocated")
    return Memory(allocated=get("cuda.allocated"), reserved=get("cuda.reserved"),
                  peak_allocated=get("cuda.peak_allocated"), alloc_retries=get("cuda.alloc_retries"),
                  ooms=get("cuda.ooms"), inactive_split=get("cuda.inactive_split"), peak_reserved=get("cuda.peak_reserved"),
                  total=get("cuda.total"), limit=get("cuda.limit"),
                  retries_per_step=None if retries is None else round(retries / (b - a), 4),
                  retries_from=a, retries_to=b, ooms_in_window=None if ooms is None else int(ooms),
                  expandable=None if expandable is None else bool(expandable),
                  growth=growth(history.get(ids["cuda.allocated"], ()), history.get(peak, ()) if peak is not None else ()))


def growth(allocated: Iterable[tuple[int, int, float]], peak: Iterable[tuple[int, int, float]] = ()) -> MemoryGrowth | None:
    """The live tensors' growth over the newest MEMORY_GROWTH_WINDOW of reads: a least-squares
    line through cuda.allocated against time (and against the step each read came in), how well
    it fits (R²), and the line through the high-water mark (cuda.peak_allocated) over the window's
    newest third. (t ns, step, value) reads, oldest first. None with fewer than two reads.

    cuda.allocated, not cuda.reserved: reserved is the allocator's cache, which grows in whole
    segments ahead of what is asked, stays up after the tensors are freed and rises in a healthy
    warm-up; the live tensors are what a leak keeps and what the cache is freed for before an
    out-of-memory error (the retries memory-pressure counts). Both come from one read of
    torch.cuda.memory_stats() (probe/core.py): there is no job with reserved and not allocated."""
    reads = list(allocated)
    if len(reads) < 2:
        return None
    since = reads[-1][0] - T.MEMORY_GROWTH_WINDOW.value * 1e9
    reads = [r for r in reads if r[0] >= since]
    if len(reads) < 2:
        return None
    t0 = reads[0][0]
    rate, fit = line([(t - t0) / 1e9 for t, _, _ in reads], [v for _, _, v in reads])
    per_step, _ = line([float(step) for _, step, _ in reads], [v for _, _, v in reads])
    span = (reads[-1][0] - t0) / 1e9
    peaks = list(peak)
    newest = [r for r in peaks if r[0] >= reads[-1][0] - span / 3 * 1e9]
    peak_rate, _ = line([(t - t0) / 1e9 for t, _, _ in newest], [v for _, _, v in newest])
    return MemoryGrowth(reads=len(reads), span_s=round(span, 3), rate=_round(rate), fit=round(fit, 4),
                        per_step=_round(per_step), peak_rate=_round(peak_rate), allocated=int(reads[-1][2]),
                        peak=int(peaks[-1][2]) if peaks else None)


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def line(xs: list[float], ys: list[float]) -> tuple[float | None, float]:
    """The least-squares line through (x, y): (its slope, R²); (None, 0) where the x do not vary,
    R² 0 where the y do not (a flat line: no trend to explain)."""
    n = len(xs)
    if n < 2:
        return None, 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return None, 0.0
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    syy = sum((y - my) ** 2 for y in ys)
    return sxy / sxx, (sxy * sxy / (sxx * syy) if syy > 0 else 0.0)


def full_in_s(m: Memory) -> float | None:
    """Seconds until the high-water mark (the newest peak read, else the live bytes) reaches what
    the allocator may use, at the live tensors' rate; None where they do not grow or a number is
    missing. 0 once there."""
    g, cap = m.growth, m.capacity
    if g is None or g.rate is None or g.rate <= 0 or cap is None:
        return None
    level = g.peak if g.peak is not None else g.allocated
    if level is None:
        return None
    return max(0.0, (cap - level) / g.rate)


def increase(samples: Iterable[tuple[int, int, float]], first_step: int, last_step: int) -> tuple[float | None, int, int]:
    """How much a counter rose between its first and last reads taken in steps first_step..
    last_step + 1 (a read carries the step in progress), and those reads' steps: (rise, from, to).
    A fall (the job reset its allocator's statistics) counts as a restart from zero. None when
    fewer than two reads span a step."""
    within = [(step, v) for _, step, v in samples if first_step <= step <= last_step + 1]
    if len(within) < 2 or within[-1][0] <= within[0][0]:
        return None, 0, 0
    rise = 0.0
    for (_, before), (_, after) in zip(within, within[1:], strict=False):
        rise += after - before if after >= before else after
    return rise, within[0][0], within[-1][0]


def peak_share(m: Memory) -> float | None:
    """The peak of live tensors over what the allocator may use."""
    cap = m.capacity
    return m.peak_allocated / cap if m.peak_allocated is not None and cap else None


def unallocated(m: Memory) -> int | None:
    """Reserved by the allocator but not in live tensors: its cache (free segments, and split
    blocks that a request of another size may not fit)."""
    return max(0, m.reserved - m.allocated) if m.reserved is not None and m.allocated is not None else None


def forecast(m: Memory | None) -> str | None:
    """'peak 71.2 of 79.6 GiB: 11% left', once the peak is within MEMORY_FULL of the capacity."""
    share = peak_share(m) if m is not None else None
    if m is None or share is None or share < T.MEMORY_FULL.value:
        return None
    cap = "the cap of " if m.limit else ""
    # (peak_share is a number only where the peak and the capacity are)
    return f"peak {(m.peak_allocated or 0) / GIB:.1f} of {cap}{(m.capacity or 0) / GIB:.1f} GiB: {max(0.0, 1 - share):.0%} left"


# -- what an out-of-memory error says (torch's CUDACachingAllocator message) --------------------------

_UNITS = {"bytes": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_SIZE = r"([\d.]+) (bytes|B|KiB|MiB|GiB|TiB)"
_OOM_PARTS = {
    "asked": re.compile(r"Tried to allocate " + _SIZE),
    "capacity": re.compile(r"total capacity of " + _SIZE),
    "free": re.compile(r"of which " + _SIZE + " is free"),
    "allocated": re.compile(r"Of the allocated memory " + _SIZE + " is allocated by PyTorch"),
    "unallocated": re.compile(_SIZE + " is reserved by PyTorch but unallocated"),
}


def oom_numbers(text: str) -> dict[str, int]:
    """The sizes a CUDA out-of-memory message gives, in bytes, by what they are: asked (the request
    that failed), capacity, free (on the device), allocated (in live tensors), unallocated (reserved
    by the allocator, not in tensors). Missing ones are left out."""
    out = {}
    for key, pattern in _OOM_PARTS.items():
        found = pattern.search(text)
        if found:
            out[key] = int(float(found.group(1)) * _UNITS[found.group(2)])
    return out


