"""`tuimon baseline save` (from a running job or a recording) and `tuimon baseline show`."""

from __future__ import annotations

import os
import sys

from ..channel import procinfo
from ..monitor.baseline import BaselineBuilder, BaselineError, describe, load, save
from ..monitor.session import LiveSession, run_cycles
from .attach import read_recording


def cmd_baseline_save(args) -> int:
    if os.path.exists(args.output) and not args.force:  # said before measuring, not after
        print(f"tuimon: {args.output} exists: --force to overwrite it, or another -o", file=sys.stderr)
        return 2
    builder = _from_recording(args.recording) if args.recording else _from_job(args.pid, args.seconds, args.interval)
    if isinstance(builder, int):
        return builder
    try:
        baseline = builder.build()
        save(baseline, args.output, args.force)
    except BaselineError as e:
        print(f"tuimon: no baseline saved: {e}", file=sys.stderr)
        return 1
    print(describe(baseline))
    print(f"saved to {args.output}; compare a job with it: tuimon attach PID --baseline {args.output}")
    return 0


def _from_job(pid: int, seconds: float, interval: float) -> BaselineBuilder | int:
    if procinfo.start_ticks(pid) is None:
        print(f"tuimon: no process with PID {pid}", file=sys.stderr)
        return 2
    builder = BaselineBuilder(f"PID {pid} for {seconds:g} s")
    print(f"tuimon: measuring PID {pid} for {seconds:g} s (Ctrl-C ends it early)", file=sys.stderr)
    session = LiveSession(pid, interval)
    try:
        run_cycles(session, interval, builder.add, lambda c: c.process is not None and not c.process.alive, seconds)
    finally:
        session.stop()
    return builder


def _from_recording(path: str) -> BaselineBuilder | int:
    builder = BaselineBuilder(f"recording {os.path.basename(path)}")
    return builder if read_recording(path, builder.add) is not None else 2


def cmd_baseline_show(args) -> int:
    try:
        print(describe(load(args.file)))
    except BaselineError as e:
        print(f"tuimon: {e}", file=sys.stderr)
        return 2
    return 0
