"""`tuimon` commands: run, attach, demo, ls."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from ..channel import ChannelError, SegmentReader, list_segments, segment_path
from ..channel.discovery import segment_state
from ..monitor.training import TrainingView
from ..sources.channel import ChannelSource
from . import launch, textview
from .doctor import run_doctor
from .record import record
from .target import open_channel


def _interval(text: str) -> float:
    v = float(text)
    if v < 0.1:
        raise argparse.ArgumentTypeError("the interval is at least 0.1 s")
    return v


def cmd_attach(args) -> int:
    try:
        reader = open_channel(args.pid)
        view = TrainingView(ChannelSource(reader))
        if args.once:
            view.poll()
            deadline = time.monotonic() + args.window
            while time.monotonic() < deadline:
                time.sleep(min(0.1, args.window))
                view.poll()
            snap = view.snapshot()
            if args.json:
                print(json.dumps(snap, indent=2))
            else:
                print(textview.summary_line(snap))
            return 0
        textview.follow(view, args.interval)
        return 0
    except ChannelError as e:
        print(f"tuimon: {e}", file=sys.stderr)
        return 2


def _run(cmd: list[str], headless: bool, interval: float) -> int:
    if not cmd:
        print("tuimon: nothing to run: tuimon run [--headless] -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    cmd = launch.command(cmd)
    env = launch.probe_env()
    if headless:
        try:
            os.execvpe(cmd[0], cmd, env)  # the job keeps our PID: `tuimon attach $!` works
        except OSError as e:
            print(f"tuimon: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr)
            return 127
    try:
        child = subprocess.Popen(cmd, env=env)
    except OSError as e:
        print(f"tuimon: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr)
        return 127
    path = segment_path(child.pid)
    reader = None
    try:
        while reader is None and child.poll() is None:
            try:
                reader = SegmentReader(path)
            except ChannelError:
                time.sleep(0.1)  # the probe has not created the channel yet
        if reader is not None:
            view = TrainingView(ChannelSource(reader))
            textview.follow(view, interval, until=lambda: child.poll() is not None)
        else:
            print("tuimon: the job ended before its channel appeared", file=sys.stderr)
        return child.wait()
    except KeyboardInterrupt:
        child.wait()  # Ctrl-C reached the job too (same process group)
        return child.returncode
    finally:
        if reader is not None and child.poll() is not None:
            try:
                os.unlink(path)
            except OSError:
                pass


def cmd_run(args) -> int:
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    return _run(cmd, args.headless, args.interval)


def cmd_demo(args) -> int:
    cmd = [sys.executable, "-m", "tuimon.workloads.demo_train", "--seconds", str(args.seconds)]
    return _run(cmd, args.headless, args.interval)


def cmd_ls(args) -> int:
    rows = list_segments()
    if not rows:
        print("no tuimon channels of yours are open")
    for pid, path in rows:
        print(f"{pid:>8}  {segment_state(path):<10}  {path}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tuimon", description="Monitor a PyTorch training process.")
    sub = p.add_subparsers(dest="cmd", required=True)

    a = sub.add_parser("attach", help="monitor a running process by PID")
    a.add_argument("pid", type=int)
    a.add_argument("--once", action="store_true", help="print one snapshot and exit")
    a.add_argument("--json", action="store_true", help="with --once: as JSON")
    a.add_argument("--window", type=float, default=0.0, help="with --once: keep reading this many seconds first")
    a.add_argument("--interval", type=_interval, default=1.0, help="seconds between updates (>= 0.1)")
    a.set_defaults(func=cmd_attach)

    r = sub.add_parser("run", help="run a training command with the probe installed")
    r.add_argument("--headless", action="store_true", help="no monitor: attach later with `tuimon attach PID`")
    r.add_argument("--interval", type=_interval, default=1.0)
    r.add_argument("command", nargs=argparse.REMAINDER)
    r.set_defaults(func=cmd_run)

    d = sub.add_parser("demo", help="run the bundled training workload under the monitor")
    d.add_argument("--seconds", type=float, default=0, help="stop after this long (0: until Ctrl-C)")
    d.add_argument("--headless", action="store_true")
    d.add_argument("--interval", type=_interval, default=1.0)
    d.set_defaults(func=cmd_demo)

    rec = sub.add_parser("record", help="record GPU, process and channel samples of PID to a file")
    rec.add_argument("pid", type=int)
    rec.add_argument("-o", "--output", required=True)
    rec.add_argument("--seconds", type=float, default=0, help="stop after this long (0: when PID exits)")
    rec.add_argument("--interval", type=_interval, default=1.0)
    rec.add_argument("--note", default="", help="what was running, stored in the file's header")
    rec.set_defaults(func=lambda a: record(a.pid, a.output, a.seconds, a.interval, a.note))

    doc = sub.add_parser("doctor", help="what works on this machine and what does not, with fixes")
    doc.set_defaults(func=lambda a: run_doctor())

    ls = sub.add_parser("ls", help="list your processes that have a tuimon channel")
    ls.set_defaults(func=cmd_ls)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
