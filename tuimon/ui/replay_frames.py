"""A MonitorState filled from a recording at once (no pacing): for screenshots and snapshot tests."""

from __future__ import annotations

from ..model import Baseline
from ..monitor.state import MonitorState
from ..sources.recording import Recording


def state_from_recording(path: str, upto: int | None = None,
                         baseline: tuple[str, Baseline] | None = None) -> MonitorState:
    """The state after the first `upto` cycles (all when None); baseline: (file, Baseline)."""
    state = MonitorState(baseline=baseline)
    for k, cycle in enumerate(Recording(path).cycles()):
        if upto is not None and k >= upto:
            break
        state.apply(cycle)
    return state
