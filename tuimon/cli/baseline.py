"""`tuimon baseline save` (from a running job or a recording) and `tuimon baseline show`."""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

from ..channel import ChannelError, procinfo
from ..monitor.baseline import BaselineBuilder, BaselineError, describe, dumps, load, save
from ..monitor.session import LiveSession, run_cycles
from ..monitor.target import open_channel
from .attach import read_recording

if TYPE_CHECKING:
    import argparse

    from ..model import Cycle

STDOUT = "-"


def cmd_baseline_save(args: argparse.Namespace) -> int:
    """Everything that would make the save fail is refused before measuring, not after."""
    why = _cannot_write(args.output, args.force)
    if why:
        print(f"tuimon: {why}", file=sys.stderr)
        return 2
    builder = _from_recording(args.recording) if args.recording else _from_job(args.pid, args.seconds, args.interval)
    if isinstance(builder, int):
        return builder
    try:
        baseline = builder.build()
        if args.output == STDOUT:
            sys.stdout.write(dumps(baseline))
            sys.stdout.flush()
        else:
            save(baseline, args.output, args.force)
    except BaselineError as e:
        print(f"tuimon: no baseline saved: {e}", file=sys.stderr)
        return 1
    if args.output == STDOUT:  # (the words go beside the file, not into it)
        print(describe(baseline), file=sys.stderr)
        print("written to standard output", file=sys.stderr)
    else:
        print(describe(baseline))
        print(f"saved to {args.output}; compare a job with it: tuimon attach PID --baseline {args.output}")
    return 0


def _cannot_write(path: str, force: bool) -> str | None:
    """Why the baseline could not be written to path, found by trying (a file made and removed
    beside it: permissions, a missing folder, a read-only disk); None where it can."""
    if path == STDOUT:
        return None
    if not path:
        return "-o is empty: the baseline file's name, or - for standard output"
    if os.path.isdir(path):
        return f"{path} is a folder: -o names the baseline file (e.g. {os.path.join(path, 'baseline.json')})"
    if os.path.exists(path) and not force:
        return f"{path} exists: --force to overwrite it, or another -o"
    tmp = f"{path}.tmp{os.getpid()}"  # (the name save() writes first)
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(tmp)
    except OSError as e:
        return f"cannot write {path}: {e.strerror or e}"
    return None


def _from_job(pid: int, seconds: float, interval: float) -> BaselineBuilder | int:
    if procinfo.start_ticks(pid) is None:
        print(f"tuimon: no process with PID {pid}", file=sys.stderr)
        return 2
    try:  # a job with no channel has no steps to measure
        open_channel(pid)[0].close()
    except ChannelError as e:
        print(f"tuimon: {e}", file=sys.stderr)
        return 2
    builder = BaselineBuilder(f"PID {pid}")
    print(f"tuimon: measuring PID {pid} for {seconds:g} s (Ctrl-C ends it early)", file=sys.stderr)
    session = LiveSession(pid, interval)
    exited = []

    def done(c: Cycle) -> bool:
        if c.process is not None and not c.process.alive:
            exited.append(True)
        return bool(exited)

    start = time.monotonic()
    try:
        run_cycles(session, interval, builder.add, done, seconds)
    finally:
        session.stop()
    took = time.monotonic() - start
    ended = " (until it exited)" if exited else f" (of {seconds:g} s: Ctrl-C)" if took < seconds else ""
    builder.source = f"PID {pid} for {took:.1f} s{ended}"  # the time measured, not the time asked for
    return builder


def _from_recording(path: str) -> BaselineBuilder | int:
    builder = BaselineBuilder(f"recording {os.path.basename(path)}")
    return builder if read_recording(path, builder.add) is not None else 2


def cmd_baseline_show(args: argparse.Namespace) -> int:
    try:
        print(describe(load(args.file)))
    except BaselineError as e:
        print(f"tuimon: {e}", file=sys.stderr)
        return 2
    return 0
