"""The in-process probe. Runs inside the training process; imports only tuimon.channel (torch and
nvtx lazily, only when the job itself imports them).

Its API is imported on first use (PEP 562): a probe loaded into a running job imports its modules
one at a time, off the job's main thread (mid_run.py), and this package must not pull them all in."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import ProbeStatus, count, instrument, range, status, step

__all__ = ["ProbeStatus", "count", "instrument", "range", "status", "step"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'tuimon.probe' has no attribute {name!r}")
    from . import api

    value = getattr(api, name)
    globals()[name] = value  # later lookups are plain module attributes
    return value
