"""The shared-memory channel between the probe (training process) and monitors. Stdlib only.

Its names are imported on first use (PEP 562): the probe, which needs the layout and the writer,
never loads the monitor's reader and discovery (what a probe loaded into a running job imports is
what it pauses the job for, tuimon/probe/mid_run.py)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .discovery import Found, cleanup_stale, find_segments, list_segments
    from .errors import (
        ChannelError,
        CorruptSegment,
        ForeignSegment,
        IncompatibleSegment,
        NoSegment,
        StaleSegment,
    )
    from .meta import JobMeta
    from .paths import segment_path, shm_dir
    from .reader import Batch, SegmentInfo, SegmentReader
    from .writer import SegmentWriter

_WHERE = {
    "Found": "discovery", "cleanup_stale": "discovery", "find_segments": "discovery", "list_segments": "discovery",
    "ChannelError": "errors", "CorruptSegment": "errors", "ForeignSegment": "errors",
    "IncompatibleSegment": "errors", "NoSegment": "errors", "StaleSegment": "errors",
    "JobMeta": "meta", "segment_path": "paths", "shm_dir": "paths",
    "Batch": "reader", "SegmentInfo": "reader", "SegmentReader": "reader", "SegmentWriter": "writer",
}

__all__ = [
    "Batch",
    "ChannelError",
    "CorruptSegment",
    "ForeignSegment",
    "Found",
    "IncompatibleSegment",
    "JobMeta",
    "NoSegment",
    "SegmentInfo",
    "SegmentReader",
    "SegmentWriter",
    "StaleSegment",
    "cleanup_stale",
    "find_segments",
    "list_segments",
    "segment_path",
    "shm_dir",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'tuimon.channel' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups are plain module attributes
    return value
