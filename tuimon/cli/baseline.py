"""`tuimon baseline save` (from a running job or a recording) and `tuimon baseline show`."""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

from ..channel import ChannelError, procinfo
from ..monitor.baseline import BaselineBuilder, BaselineError, describe, dumps, load
from ..monitor.session import LiveSession, run_cycles
from ..monitor.target import open_channel
from . import output
from .attach import read_recording

if TYPE_CHECKING:
    import argparse

    from ..model import Cycle

def cmd_baseline_save(args: argparse.Namespace) -> int:
    """Everything that would make the save fail is refused before measuring, not after."""
    try:
        output.check(args.output, args.force)
    except output.OutputError as e:
        print(f"tuimon: {e}", file=sys.stderr)
        return 2
    builder = _from_recording(args.recording) if args.recording else _from_job(args.pid, args.seconds, args.interval)
    if isinstance(builder, int):
        return builder
    try:
        baseline = builder.build()
        with output.opened(args.output, args.force) as f:  # (a regular file: written whole or not at all)
            f.write(dumps(baseline))
    except BaselineError as e:
        print(f"tuimon: no baseline saved: {e}", file=sys.stderr)
        return 1
    except output.OutputError as e:  # (what -o names changed while the job was measured)
        print(f"tuimon: no baseline saved: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise  # (the reader of standard output left: main() ends quietly)
    except OSError as e:
        print(f"tuimon: no baseline saved: cannot write {args.output}: {e.strerror or e}", file=sys.stderr)
        return 1
    say = output.words_to(args.output)  # (the words go beside the data, never into it)
    print(describe(baseline), file=say)
    if args.output == output.STDOUT:
        print("written to standard output", file=say)
    else:
        print(f"saved to {args.output}; compare a job with it: tuimon attach PID --baseline {args.output}", file=say)
    return 0


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
