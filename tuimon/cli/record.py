"""`tuimon record PID`: the same cycles the TUI draws (GPUs, process tree, channel, capture
states and summaries, failures), one JSON line each, into a recording."""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING

from ..channel import procinfo
from ..monitor.session import LiveSession, run_cycles
from ..sources.recording import Recorder
from . import output

if TYPE_CHECKING:
    import argparse

    from ..model import Cycle


def record(pid: int, path: str, seconds: float, interval: float, note: str = "", force: bool = False) -> int:
    """path '-': standard output (the messages go to standard error)."""
    if procinfo.start_ticks(pid) is None:
        print(f"tuimon: no process with PID {pid}: nothing to record", file=sys.stderr)
        return 2
    out = contextlib.ExitStack()
    try:  # (a stream: a regular file is written as it goes, and what was written is kept if it stops)
        rec = Recorder(out.enter_context(output.opened(path, force, in_place=True)), note)
    except output.OutputError as e:
        print(f"tuimon: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        out.close()
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
    finally:
        with contextlib.suppress(OSError):
            out.close()  # (rec.close() flushed and synced: this only lets go of the file)
    if failed and isinstance(failed[0], BrokenPipeError):
        raise failed[0]  # the reader left (`record -o - | head`): main() ends quietly, as `--plain | head` does
    if failed:
        print(f"tuimon: recording stopped after {n} cycles: cannot write {path}: "
              f"{failed[0].strerror or failed[0]} (what was written before is kept)", file=sys.stderr)
        return 1
    print(f"recorded {n} cycle{'s' if n != 1 else ''} to {'standard output' if path == '-' else path}",
          file=output.words_to(path))
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    return record(args.pid, args.output, args.seconds, args.interval, args.note, args.force)
