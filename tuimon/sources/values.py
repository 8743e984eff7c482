"""Unavailable values: a field that could not be read is {"na": reason}, never an exception and
never a made-up number. Samples are plain JSON-able dicts, so they record and replay as they are."""

from __future__ import annotations


def na(reason: str) -> dict:
    return {"na": reason}


def is_na(v) -> bool:
    return isinstance(v, dict) and "na" in v


def num(v):
    """The number, or None when it is unavailable (or not a number)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return v


def reason(v) -> str | None:
    return v["na"] if is_na(v) else None
