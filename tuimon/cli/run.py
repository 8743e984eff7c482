"""`tuimon run` and `tuimon demo`: a job launched with the probe, and its monitor."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys

from ..capture.nsys import find_nsys
from ..capture.nsys_session import NsysArgsError, NsysSession, launch_command, session_name, split_args
from ..channel import segment_path
from ..channel.procinfo import exit_status, how_it_ended
from ..monitor.session import LiveSession
from . import launch, textview
from .export import start_exporter
from .tui import has_terminal, say, tui


def run(cmd: list[str], headless: bool, interval: float, plain: bool = False, demo: bool = False,
        nsys: bool = False, nsys_args: str = "", metrics: tuple[int, str] | None = None, baseline=None) -> int:
    """demo: `q` (or a closed terminal) stops the job, and that is a clean exit (0). metrics:
    (port, address) to serve Prometheus metrics on while the monitor runs. baseline: (file,
    Baseline) to compare the job against."""
    if not cmd:
        print("tuimon: nothing to run: tuimon run [--headless] -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    if headless and metrics:
        print("tuimon: --headless runs no monitor, so nothing serves metrics: `tuimon export --port PORT PID` "
              "beside it does", file=sys.stderr)
        return 2
    if headless and baseline:
        print("tuimon: --headless runs no monitor to compare with a baseline: `tuimon attach PID --baseline FILE` "
              "beside it does", file=sys.stderr)
        return 2
    exporter = None
    if metrics:
        exporter = start_exporter(*metrics)
        if exporter is None:
            return 2
    if not headless and not plain and not has_terminal():
        print("tuimon: no terminal here: following the job in plain text (--plain); "
              "--headless runs it with no monitor", file=sys.stderr)
        plain = True
    cmd = launch.command(cmd)
    env = launch.probe_env()
    session = None
    if nsys:
        tool = find_nsys()
        if tool is None:
            print("tuimon: --nsys: Nsight Systems (nsys) not found; install it or put it on PATH "
                  "(captures without it use torch.profiler: run without --nsys)", file=sys.stderr)
            return 2
        try:
            launch_args, start_args = split_args(shlex.split(nsys_args))
        except (NsysArgsError, ValueError) as e:
            print(f"tuimon: {e}", file=sys.stderr)
            return 2
        # The job runs in an nsys session of its own (tracing set up at launch); each window is
        # `nsys start` / `nsys stop` from the monitor, with a complete report while the job runs.
        session = NsysSession(tool, session_name())
        env.update(TUIMON_NSYS="1", TUIMON_NSYS_SESSION=session.name, TUIMON_NSYS_START_ARGS=shlex.join(start_args))
        cmd = launch_command(tool, session.name, cmd, launch_args)
    if headless:
        try:
            os.execvpe(cmd[0], cmd, env)  # the job keeps our PID: `tuimon attach $!` works
        except OSError as e:
            print(f"tuimon: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr)
            return 127
    log, log_path = (None, None) if plain else launch.job_log()  # the TUI owns the terminal
    if log_path:
        env["TUIMON_JOB_LOG"] = log_path  # (the probe keeps it in the channel: `tuimon ls` shows it)
    try:
        child = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT if log else None,
                                 start_new_session=not plain)
    except OSError as e:
        print(f"tuimon: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr)
        if exporter is not None:
            exporter.close()
        return 127
    finally:
        if log is not None:
            log.close()
    try:
        if plain:
            return _follow_plain(child, interval, exporter, baseline)
        what = "tuimon demo" if demo else "tuimon run"
        label = f"{what}, every {interval:g} s" + (f", metrics on :{exporter.port}" if exporter else "")
        tui(LiveSession(child.pid, interval, popen=child, job_log=log_path), label, quit_stops_job=demo,
            baseline=baseline, on_view=exporter.publish if exporter else None)
        say(f"tuimon: the job's output is in {log_path}")
        if child.poll() is None:
            if not demo:
                say(f"tuimon: the job (PID {child.pid}) goes on; watch it again with `tuimon attach {child.pid}`")
                return 0
            _stop(child)
            return 0  # quitting the demo stops its job: that is the normal end
        say(f"tuimon: the job {how_it_ended(child.returncode)}")
        return exit_status(child.returncode)
    except KeyboardInterrupt:
        child.wait()
        return exit_status(child.returncode)
    finally:
        if exporter is not None:
            exporter.close()
        if session is not None:  # ended with the job already, or ends now (the job goes on untraced)
            session.shutdown()
        if child.poll() is not None:
            try:
                os.unlink(segment_path(child.pid))  # a finished job of ours: nobody else reads it
            except OSError:
                pass


def _stop(child: subprocess.Popen) -> None:
    child.send_signal(signal.SIGINT)  # the demo stops on KeyboardInterrupt, quietly
    try:
        child.wait(10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _follow_plain(child, interval: float, exporter=None, baseline=None) -> int:
    try:
        view = textview.follow(LiveSession(child.pid, interval, popen=child), interval,
                               until=lambda: child.poll() is not None, baseline=baseline,
                               on_view=exporter.publish if exporter else None)
    except KeyboardInterrupt:
        view = None
    if view is not None and view.training is None:
        print("tuimon: the job ended before its channel appeared", file=sys.stderr)
    code = child.wait()
    print(f"tuimon: the job {how_it_ended(code)}", file=sys.stderr)
    return exit_status(code)


def cmd_run(args) -> int:
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    return run(cmd, args.headless, args.interval, args.plain, nsys=args.nsys, nsys_args=args.nsys_args,
               metrics=None if args.port is None else (args.port, args.addr), baseline=args.baseline)


def cmd_demo(args) -> int:
    cmd = [sys.executable, "-m", "tuimon.workloads.demo_train", "--seconds", str(args.seconds)]
    return run(cmd, args.headless, args.interval, args.plain, demo=True)
