"""Running the slow tools a capture summary needs (nsys stats, the trace reader) as child
processes that a timeout or a cancel can stop at any moment."""

from __future__ import annotations

import subprocess
import threading
import time
from typing import IO

from ..model.record import record


class CommandFailed(Exception):
    """Said to the person: why a summary could not be made (timed out, cancelled, not startable)."""


@record(kw_only=False)
class Done:
    returncode: int
    stdout: str
    stderr: str


def run(cmd: list[str], timeout: float, cancel: threading.Event | None = None) -> Done:
    """cmd's output, or CommandFailed when it cannot start, runs past timeout, or cancel is set
    (the child is killed either way)."""
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             errors="replace", start_new_session=True)
    except OSError as e:
        raise CommandFailed(f"cannot run {cmd[0]}: {e.strerror or e}") from e
    out: dict[str, str] = {}

    def drain(name: str, stream: IO[str]) -> None:  # read both pipes so a chatty child never blocks on a full one
        out[name] = stream.read()

    readers = [threading.Thread(target=drain, args=(n, s), daemon=True) for n, s in (("o", p.stdout), ("e", p.stderr))]
    for r in readers:
        r.start()
    end = time.monotonic() + timeout
    while p.poll() is None:
        if cancel is not None and cancel.is_set():
            _kill(p)
            raise CommandFailed("cancelled")
        if time.monotonic() >= end:
            _kill(p)
            raise CommandFailed(f"timed out after {timeout:g} s")
        time.sleep(0.05)
    for r in readers:
        r.join(5)
    return Done(p.returncode, out.get("o", ""), out.get("e", ""))


def _kill(p: subprocess.Popen) -> None:
    p.kill()
    try:
        p.wait(5)
    except subprocess.TimeoutExpired:
        pass
