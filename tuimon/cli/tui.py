"""Starting the Textual UI, and what to do without a terminal."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..monitor.session import Session
    from ..monitor.state import View


def has_terminal() -> bool:
    """A TUI needs both ends on a terminal (redirected, it would write escape codes to a file and
    spin reading a closed input)."""
    try:
        return sys.stdin.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def tui(session: Session | None, label: str, top: bool = False, quit_stops_job: bool = False, baseline=None,
        on_view: Callable[[View], None] | None = None) -> int:
    """baseline: (file, Baseline) to compare the job against on screen; on_view: also given each
    cycle's view (the metrics exporter's publish)."""
    from ..monitor.state import MonitorState
    from ..ui.app import make_app  # textual loads only for the TUI

    make_app(session, label, MonitorState(baseline=baseline), top=top, quit_stops_job=quit_stops_job,
             on_view=on_view).run()
    return 0


def say(line: str) -> None:
    """Print, unless the terminal is gone (SSH dropped: EIO) - what follows must still run."""
    try:
        print(line, flush=True)
    except OSError:
        pass
