"""Starting the Textual UI, and what to do without a terminal."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..model import Baseline
    from ..monitor.session import Session
    from ..monitor.state import View
    from ..ui.app import TuimonApp
    from .supervise import Supervisor


def _import_asyncio_without_ssl() -> None:
    """asyncio imports ssl (~4 MB resident: OpenSSL) for TLS transports, which the monitor never opens:
    import asyncio with ssl hidden, then unhide it (a later `import ssl` in this process still works;
    asyncio's own TLS is off in it). Only where neither is loaded yet (an embedding program's are its own)."""
    if "asyncio" in sys.modules or "ssl" in sys.modules:
        return
    sys.modules["ssl"] = None  # type: ignore[assignment]  # (None: `import ssl` raises ImportError)
    try:
        import asyncio  # noqa: F401
    finally:
        del sys.modules["ssl"]


_import_asyncio_without_ssl()
import asyncio  # noqa: E402


def no_screen() -> str | None:
    """Why the full-screen TUI cannot run here; None where it can. It needs both ends on a terminal
    (redirected, it would write escape codes to a file and spin reading a closed input) that can
    draw a screen: TERM=dumb (Emacs's shell, some CI logs) says it cannot move the cursor."""
    try:
        tty = sys.stdin.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError):
        tty = False
    if not tty:
        return "no terminal here"
    if os.environ.get("TERM") == "dumb":
        return "TERM=dumb: this terminal cannot draw a screen"
    return None


def tui(session: Session | None, label: str, top: bool = False, quit_stops_job: bool = False,
        baseline: tuple[str, Baseline] | None = None, supervisor: Supervisor | None = None,
        on_view: Callable[[View], None] | None = None) -> int:
    """baseline: (file, Baseline) to compare the job against on screen; supervisor: the
    job's (cli.supervise), whose stop signals and hangup end the app; on_view: also given each
    cycle's view (the metrics exporter's publish)."""
    from ..monitor.session import EarlyStart
    from ..monitor.state import MonitorState

    # The start (Textual's import, the first poll, the first compose) allocates much (233k blocks held at 2 s):
    # the cyclic GC's passes over them were CPU the first frame waited for (H100, 16 starts each: 0.72 ->
    # 0.66 s median). The app turns it on again once it has painted; here, as it was, whatever happens.
    gc_was_on, early = gc.isenabled(), None
    gc.disable()
    try:
        early = EarlyStart(session) if session is not None else None  # its first poll runs while the UI loads
        from ..ui.app import make_app  # textual loads only for the TUI

        app = make_app(session, label, MonitorState(baseline=baseline), top=top, quit_stops_job=quit_stops_job,
                       on_view=on_view, early=early)
        if supervisor is None:
            app.run()
        else:
            asyncio.run(_run_until_stopped(app, supervisor))
    finally:
        if gc_was_on:
            gc.enable()
        if early is not None:
            early.stop_unless_taken()  # (the app stops what it took, when it unmounts)
    return 0


async def _run_until_stopped(app: TuimonApp, supervisor: Supervisor) -> None:
    """The app on this loop; a stop signal (its handler runs on this thread, between two steps of
    the loop) schedules app.exit through the loop's thread-safe queue."""
    loop = asyncio.get_running_loop()

    def stop() -> None:
        try:
            loop.call_soon_threadsafe(app.exit)
        except RuntimeError:  # the loop has closed: the app has ended already
            pass

    with supervisor.monitoring(stop):
        if not (supervisor.stopping or supervisor.hung_up):
            await app.run_async()

