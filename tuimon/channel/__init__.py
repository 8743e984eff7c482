"""The shared-memory channel between the probe (training process) and monitors. Stdlib only."""

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
