"""`tuimon record PID`: the same cycles the TUI draws (GPUs, process tree, channel, capture
states and summaries, failures), one JSON line each, into a recording."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ..channel import procinfo
from ..monitor.session import LiveSession, run_cycles
from ..sources.recording import Recorder

if TYPE_CHECKING:
    import argparse

    from ..model import Cycle


def record(pid: int, path: str, seconds: float, interval: float, note: str = "", force: bool = False) -> int:
    """path '-': standard output (the messages go to standard error)."""
    if procinfo.start_ticks(pid) is None:
        print(f"tuimon: no process with PID {pid}: nothing to record", file=sys.stderr)
        return 2
    if path != "-" and os.path.isfile(path) and not force:  # (a device or a pipe is no recording to lose)
        print(f"tuimon: {path} exists: --force to overwrite it, or another -o", file=sys.stderr)
        return 2
    try:
        rec = Recorder(sys.stdout if path == "-" else path, note)
    except OSError as e:
        print(f"tuimon: cannot write {path}: {e.strerror or e}", file=sys.stderr)
        return 2
    session = LiveSession(pid, interval, timeline=True)  # (every step, one by one: what `tuimon trace` reads)
    if session.gpus.error:
        print(f"tuimon: recording without GPU metrics: {session.gpus.error}", file=sys.stderr)
    failed: list[OSError] = []

    def write(cycle: Cycle) -> None:
        try:
            rec.record(cycle)
        except OSError as e:
            failed.append(e)

    def done(cycle: Cycle) -> bool:
        return bool(failed) or (cycle.process is not None and not cycle.process.alive)

    try:
        n = run_cycles(session, interval, write, done, seconds)
    finally:
        session.stop()
    try:
        rec.close()
    except OSError as e:
        failed.append(e)
    if failed:
        print(f"tuimon: recording stopped after {n} cycles: cannot write {path}: "
              f"{failed[0].strerror or failed[0]} (what was written before is kept)", file=sys.stderr)
        return 1
    print(f"recorded {n} cycle{'s' if n != 1 else ''} to {'standard output' if path == '-' else path}",
          file=sys.stderr if path == "-" else sys.stdout)
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    return record(args.pid, args.output, args.seconds, args.interval, args.note, args.force)
