"""Quantities as text, the one way each is written everywhere (screens, `--plain`, verdicts, capture
summaries): bytes in binary units, percentages and shares whole. n/a for a value not known."""

from __future__ import annotations

from .values import NA, num

GIB, MIB, KIB = 2**30, 2**20, 2**10


def human_bytes(b: float | NA | None) -> str:
    """A size: GiB (TiB) with one decimal from 1 GiB up ('79.2 GiB'), below that the largest unit it fills,
    whole ('512 B', '12 KiB', '300 MiB')."""
    v = num(b)
    if v is None:
        return "n/a"
    if abs(v) >= 1024 * GIB:
        return f"{v / (1024 * GIB):.1f} TiB"
    if abs(v) >= GIB:
        return f"{v / GIB:.1f} GiB"
    for unit, size in (("MiB", MIB), ("KiB", KIB)):
        if abs(v) >= size:
            return f"{v / size:.0f} {unit}"
    return f"{v:.0f} B"


def gib(b: float | NA | None) -> str:
    """b as a number of GiB, one decimal, without the unit (the GPU panel's 'used/total GiB')."""
    v = num(b)
    return "n/a" if v is None else f"{v / GIB:.1f}"


def percent(v: float | NA | None, width: int = 0) -> str:
    """A percentage (0-100), whole: its tenths change every second and say nothing. width: right-aligned."""
    n = num(v)
    return ("n/a" if n is None else f"{n:.0f}%").rjust(width)


def share(v: float | NA | None) -> str:
    """A share (0-1) as a whole percentage."""
    n = num(v)
    return "n/a" if n is None else f"{n:.0%}"
