"""`tuimon` commands: run, attach, demo, ls."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time

from ..capture.client import CaptureClient, CaptureRefused, window_steps
from ..capture.nsys import find_nsys, nsys_command
from ..capture.summary import summarize
from ..channel import ChannelError, list_segments, procinfo, segment_path
from ..channel.discovery import segment_state
from ..channel.paths import captures_dir, program_name, safe_file_part
from ..channel.text import safe_text
from ..monitor.report import view_json
from ..monitor.session import LiveSession, ReplaySession
from ..monitor.state import MonitorState
from ..monitor.target import open_channel
from ..sources.recording import RecordingError
from . import launch, textview
from .doctor import run_doctor
from .record import record


def _interval(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0.1 <= v <= 3600:  # (also refuses nan)
        raise argparse.ArgumentTypeError("the interval is 0.1 to 3600 s")
    return v


ONCE_MIN_WINDOW_S = 0.5  # CPU % and GPM activity are rates: they need two samples this far apart


def cmd_attach(args) -> int:
    if procinfo.start_ticks(args.pid) is None:  # gone: only a channel it left can still be shown
        try:
            reader, _ = open_channel(args.pid)
            reader.close()
        except ChannelError as e:
            print(f"tuimon: {e}", file=sys.stderr)
            return 2
    session = LiveSession(args.pid, args.interval)
    if args.once:
        return _once(session, args.window, args.json, args.pid)
    if args.plain:
        textview.follow(session, args.interval)
        return 0
    return _tui(session, f"attached, every {args.interval:g} s")


def _once(session: LiveSession, window: float, as_json: bool, pid: int) -> int:
    """One snapshot over `window` seconds (at least ONCE_MIN_WINDOW_S), from the same cycles the
    TUI draws."""
    state = MonitorState()
    end = time.monotonic() + max(window, ONCE_MIN_WINDOW_S)
    try:
        while True:
            state.apply(session.poll())
            left = end - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(left, 1.0))
    finally:
        session.stop()
    view = state.view()
    if as_json:
        print(json.dumps(view_json(view, pid), indent=2))
    else:
        print(textview.summary_line(view))
        for source, why in view.problems.items():
            print(f"tuimon: {source}: {safe_text(why, 500)}", file=sys.stderr)
    return 0


def _say(line: str) -> None:
    """Print, unless the terminal is gone (SSH dropped: EIO) - what follows must still run."""
    try:
        print(line, flush=True)
    except OSError:
        pass


def _tui(session, label: str) -> int:
    from ..ui.app import make_app  # textual loads only for the TUI

    make_app(session, label).run()
    return 0


def _run(cmd: list[str], headless: bool, interval: float, plain: bool = False, stop_on_quit: bool = False,
         nsys: bool = False, nsys_args: str = "") -> int:
    if not cmd:
        print("tuimon: nothing to run: tuimon run [--headless] -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    cmd = launch.command(cmd)
    env = launch.probe_env()
    if nsys:
        tool = find_nsys()
        if tool is None:
            print("tuimon: --nsys: Nsight Systems (nsys) not found; install it or put it on PATH "
                  "(captures without it use torch.profiler: run without --nsys)", file=sys.stderr)
            return 2
        output = os.path.join(captures_dir(), f"{safe_file_part(program_name(cmd))}-{time.strftime('%Y%m%d-%H%M%S')}")
        env.update(TUIMON_NSYS="1", TUIMON_NSYS_OUTPUT=output)
        cmd = nsys_command(tool, output, cmd, shlex.split(nsys_args))
    if headless:
        try:
            os.execvpe(cmd[0], cmd, env)  # the job keeps our PID: `tuimon attach $!` works
        except OSError as e:
            print(f"tuimon: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr)
            return 127
    log, log_path = (None, None) if plain else launch.job_log()  # the TUI owns the terminal
    try:
        child = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT if log else None,
                                 start_new_session=not plain)
    except OSError as e:
        print(f"tuimon: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr)
        return 127
    finally:
        if log is not None:
            log.close()
    try:
        if plain:
            return _follow_plain(child, interval)
        _tui(LiveSession(child.pid, interval, popen=child), f"tuimon run, every {interval:g} s")
        _say(f"tuimon: the job's output is in {log_path}")
        if child.poll() is None:
            if stop_on_quit:
                child.send_signal(signal.SIGINT)
                try:
                    child.wait(10)
                except subprocess.TimeoutExpired:
                    child.kill()
            else:
                _say(f"tuimon: the job (PID {child.pid}) goes on; watch it again with `tuimon attach {child.pid}`")
                return 0
        return child.wait()
    except KeyboardInterrupt:
        child.wait()
        return child.returncode
    finally:
        if child.poll() is not None:
            _remove_segments(child.pid)


def _remove_segments(pid: int) -> None:
    """The segment a finished job of ours left (the job has no reader left but us)."""
    try:
        os.unlink(segment_path(pid))
    except OSError:
        pass


def _follow_plain(child, interval: float) -> int:
    view = textview.follow(LiveSession(child.pid, interval, popen=child), interval,
                           until=lambda: child.poll() is not None)
    if view.training is None:
        print("tuimon: the job ended before its channel appeared", file=sys.stderr)
    code = child.wait()
    print(f"tuimon: the job exited with code {code}", file=sys.stderr)
    return code


def cmd_run(args) -> int:
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    return _run(cmd, args.headless, args.interval, args.plain, nsys=args.nsys, nsys_args=args.nsys_args)


def cmd_capture(args) -> int:
    try:
        reader, why = open_channel(args.pid)
        info, steps_seen = reader.info, reader.steps
        reader.close()
        if why:
            print(f"tuimon: {why}", file=sys.stderr)
        client = CaptureClient(info.path, info.pid, info.start_ticks)
        kind = info.meta.get("capture_kind", "torch.profiler")
        steps, seconds = args.steps, args.seconds
        if steps is None and seconds is None:  # as `c` does: steps if the loop has them, else 10 s
            steps, seconds = (10, None) if steps_seen else (None, 10.0)
        seq = client.request(steps=steps, seconds=seconds)
        what = f"{seconds:g} s" if seconds is not None else f"{steps} steps"
        if seconds is not None and args.seconds is None:
            what += " (no steps seen yet)"
        print(f"asked PID {info.pid} for a {kind} capture of {what} (request {seq})")
        if not args.wait:
            return 0
        st = client.wait(seq, args.timeout, on_change=lambda s: print("  " + _progress_line(s)))
        if st.state != "done":
            print(f"tuimon: capture {st.state}: {st.message}", file=sys.stderr)
            return 1
        if kind == "nsys" and not _wait_for_report(st.path, min(args.timeout, 15)):
            print(st.path)
            print("nsys writes the report when the job exits; then: nsys stats --report nvtx_sum <report>")
            return 0
        result = summarize(st)
        print(result.file)
        if result.error:
            print(f"tuimon: {result.error}", file=sys.stderr)
        for line in result.lines:
            print(line)
        return 0 if result.state == "done" else 1
    except (ChannelError, CaptureRefused) as e:
        print(f"tuimon: {e}", file=sys.stderr)
        return 2


def _progress_line(st) -> str:
    """'capturing: steps 12..15 capturing'; without steps covered (armed, or seconds over a loop
    without steps) none are shown."""
    steps = window_steps(st.state, st.first_step, st.last_step)
    return f"{st.state}: {steps + ' ' if steps else ''}{safe_text(st.message, 200)}"


def _wait_for_report(report: str, timeout: float) -> bool:
    """Whether the report is there and complete (non-empty, size steady) within timeout."""
    end = time.monotonic() + timeout
    last_size = -1
    while time.monotonic() < end:
        size = os.path.getsize(report) if os.path.exists(report) else 0
        if size and size == last_size:
            return True
        last_size = size
        time.sleep(1.0)
    return False


def cmd_demo(args) -> int:
    cmd = [sys.executable, "-m", "tuimon.workloads.demo_train", "--seconds", str(args.seconds)]
    return _run(cmd, args.headless, args.interval, args.plain, stop_on_quit=True)


def cmd_top(args) -> int:
    return _tui(LiveSession(None, args.interval), f"top, every {args.interval:g} s")


def cmd_replay(args) -> int:
    try:
        session = ReplaySession(args.file, args.speed)
    except OSError as e:
        print(f"tuimon: cannot read {args.file}: {e.strerror or e}", file=sys.stderr)
        return 2
    except RecordingError as e:
        print(f"tuimon: {e}", file=sys.stderr)
        return 2
    return _tui(session, f"replay of {os.path.basename(args.file)}")


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
    a.add_argument("--plain", action="store_true", help="a line of text per interval instead of the TUI")
    a.set_defaults(func=cmd_attach)

    r = sub.add_parser("run", help="run a training command with the probe installed")
    r.add_argument("--headless", action="store_true", help="no monitor: attach later with `tuimon attach PID`")
    r.add_argument("--interval", type=_interval, default=1.0)
    r.add_argument("--plain", action="store_true", help="a line of text per interval instead of the TUI")
    r.add_argument("--nsys", action="store_true", help="run it under Nsight Systems: `c` then records nsys windows")
    r.add_argument("--nsys-args", default="", help="more `nsys profile` options, quoted as one string")
    r.add_argument("command", nargs=argparse.REMAINDER)
    r.set_defaults(func=cmd_run)

    cap = sub.add_parser("capture", help="ask a running job for a capture window and print where it went")
    cap.add_argument("pid", type=int)
    g = cap.add_mutually_exclusive_group()
    g.add_argument("--steps", type=int, help="window length in steps (default: 10, or 10 s when the "
                                              "job has counted no steps)")
    g.add_argument("--seconds", type=float, help="window length in seconds, for loops without steps")
    cap.add_argument("--wait", action="store_true", help="wait for the result and print its summary")
    cap.add_argument("--timeout", type=float, default=300)
    cap.set_defaults(func=cmd_capture)

    d = sub.add_parser("demo", help="run the bundled training workload under the monitor")
    d.add_argument("--seconds", type=float, default=0, help="stop after this long (0: until Ctrl-C)")
    d.add_argument("--headless", action="store_true")
    d.add_argument("--interval", type=_interval, default=1.0)
    d.add_argument("--plain", action="store_true", help="a line of text per interval instead of the TUI")
    d.set_defaults(func=cmd_demo)

    t = sub.add_parser("top", help="all GPUs and their processes, no target")
    t.add_argument("--interval", type=_interval, default=1.0)
    t.set_defaults(func=cmd_top)

    rp = sub.add_parser("replay", help="show a recording (tuimon record) through the same UI")
    rp.add_argument("file")
    rp.add_argument("--speed", type=float, default=1.0, help="2: twice as fast")
    rp.set_defaults(func=cmd_replay)

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
