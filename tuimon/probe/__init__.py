"""The in-process probe. Runs inside the training process; imports only tuimon.channel (torch and
nvtx lazily, only when the job itself imports them)."""

from .api import ProbeStatus, count, instrument, range, status, step

__all__ = ["ProbeStatus", "count", "instrument", "range", "status", "step"]
