"""A MonitorState filled from a recording at once (no pacing): for screenshots and snapshot tests."""

from __future__ import annotations

from ..monitor.state import MonitorState
from ..sources.recording import read_recording


def state_from_recording(path: str, upto: int | None = None) -> MonitorState:
    """The state after the first `upto` entries (all when None)."""
    state = MonitorState()
    _, entries = read_recording(path)
    for k, e in enumerate(entries):
        if upto is not None and k >= upto:
            break
        state.apply(e["source"], e["data"])
    return state
