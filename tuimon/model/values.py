"""Unavailable values: a field that could not be read is NA(reason), never an exception and never
a made-up number. In JSON it is {"na": reason}, as in recording format v1."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NA:
    reason: str

    def __str__(self) -> str:
        return f"n/a ({self.reason})"


def is_na(v: object) -> bool:
    return isinstance(v, NA)


def num(v: object) -> float | None:
    """The number, or None when it is unavailable (or not a number)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return v


def reason(v: object) -> str | None:
    return v.reason if isinstance(v, NA) else None
