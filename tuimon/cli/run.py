"""`tuimon run` and `tuimon demo`: a job launched with the probe, and its monitor."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from typing import TYPE_CHECKING

from ..capture.nsys import find_nsys
from ..capture.nsys_session import NsysArgsError, NsysSession, launch_command, session_name, split_args
from ..channel import segment_path
from ..channel.procinfo import exit_status, how_it_ended
from ..channel.text import safe_text
from ..monitor.session import LiveSession
from . import launch, textview
from .export import start_exporter
from .supervise import StopMonitoring, Supervisor, dies_with_parent, serve_as_init, tell, under_init
from .tui import no_screen, tui

if TYPE_CHECKING:
    import argparse

    from ..export.server import Exporter
    from ..model import Baseline

EXIT_WAIT_S = 0.5  # how long the job's end is waited for once the monitor ended (q: the job goes on)


def run(cmd: list[str], headless: bool, interval: float, plain: bool = False, demo: bool = False,
        nsys: bool = False, nsys_args: str = "", metrics: tuple[int, str] | None = None,
        baseline: tuple[str, Baseline] | None = None) -> int:
    """demo: `q` (or a closed terminal) stops the job, and that is a clean exit (0). metrics:
    (port, address) to serve Prometheus metrics on while the monitor runs. baseline: (file,
    Baseline) to compare the job against."""
    if (refused := _refused(cmd, headless, metrics is not None, baseline is not None)) is not None:
        print(f"tuimon: {refused}", file=sys.stderr)
        return 2
    if os.getpid() == 1 and not headless:  # a container's entrypoint: stay PID 1 as tini does
        code = serve_as_init()
        if code is not None:
            return code
    exporter = None
    if metrics:
        exporter = start_exporter(*metrics)
        if exporter is None:
            return 2
    why = None if headless or plain else no_screen()
    if why:
        print(f"tuimon: {why}: following the job in plain text (--plain); "
              "--headless runs it with no monitor", file=sys.stderr)
        plain = True
    cmd = launch.command(cmd)
    env = launch.probe_env(kineto=not nsys)  # (under nsys: nsys traces; Kineto's CUPTI stays out of its way)
    session = None
    if nsys:
        try:
            cmd, session = _under_nsys(cmd, env, nsys_args)
        except NsysArgsError as e:
            print(f"tuimon: {e}", file=sys.stderr)
            return 2
    if headless:
        try:
            os.execvpe(cmd[0], cmd, env)  # the job keeps our PID: `tuimon attach $!` works
        except OSError as e:
            print(f"tuimon: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr)
            return 127
    if exporter is not None and metrics is not None:
        tell(f"tuimon: metrics on {metrics_url(exporter.port, metrics[1])}")
    log, log_path = launch.job_log()  # the TUI holds the terminal; a reader may close the plain lines' pipe
    env["TUIMON_JOB_LOG"] = log_path  # (the probe keeps it in the channel: `tuimon ls` shows it)
    supervisor = Supervisor()
    supervisor.install()  # before the job starts: a signal that comes first is passed on once it has
    child = None
    try:
        try:
            # A session of its own: only tuimon hears the terminal's signals, and passes them on once.
            child = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=dies_with_parent() if demo else None)
        except OSError as e:
            print(f"tuimon: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr)
            os.unlink(log_path)  # nothing ran, nothing to keep
            return 127
        finally:
            log.close()
        supervisor.adopt(child)
        tell(f"tuimon: started PID {child.pid}; its output goes to {log_path}")
        what = "tuimon demo" if demo else "tuimon run"
        if plain:
            _follow_plain(child, interval, exporter, baseline, log_path, supervisor)
        else:
            label = f"{what}, every {interval:g} s" + (f", metrics on :{exporter.port}" if exporter else "")
            tui(LiveSession(child.pid, interval, popen=child, job_log=log_path), label, quit_stops_job=demo,
                baseline=baseline, supervisor=supervisor, on_view=exporter.publish if exporter else None)
        return _after_monitor(child, demo, log_path, supervisor)
    finally:
        if child is not None and demo and child.poll() is None:
            _stop(child)  # the monitor failed: the demo job still never outlives it
        supervisor.uninstall()
        if exporter is not None:
            exporter.close()
        if session is not None:  # ended with the job already, or ends now (the job goes on untraced)
            session.shutdown()
        if child is not None and child.poll() is not None:
            try:
                os.unlink(segment_path(child.pid))  # a finished job of ours: nobody else reads it
            except OSError:
                pass


def _refused(cmd: list[str], headless: bool, metrics: bool, baseline: bool) -> str | None:
    """Why these options cannot run, in words; None when they can."""
    if not cmd:
        return "nothing to run: tuimon run [--headless] -- COMMAND [ARGS...]"
    if headless and metrics:
        return "--headless runs no monitor, so nothing serves metrics: `tuimon export --port PORT PID` beside it does"
    if headless and baseline:
        return ("--headless runs no monitor to compare with a baseline: `tuimon attach PID --baseline FILE` beside "
                "it does")
    return None


def _under_nsys(cmd: list[str], env: dict, nsys_args: str) -> tuple[list[str], NsysSession]:
    """The job's command inside an nsys session of its own (tracing set up at launch; each window is
    `nsys start` / `nsys stop` from the monitor, with a complete report while the job runs), and that
    session; env gets what the probe needs to know of it. NsysArgsError: no nsys, or bad --nsys-args."""
    tool = find_nsys()
    if tool is None:
        raise NsysArgsError("--nsys: Nsight Systems (nsys) not found; install it or put it on PATH (captures "
                            "without it use torch.profiler: run without --nsys)")
    try:
        launch_args, start_args = split_args(shlex.split(nsys_args))
    except ValueError as e:
        raise NsysArgsError(str(e)) from None
    session = NsysSession(tool, session_name())
    env.update(TUIMON_NSYS="1", TUIMON_NSYS_SESSION=session.name, TUIMON_NSYS_START_ARGS=shlex.join(start_args))
    return launch_command(tool, session.name, cmd, launch_args), session


def _after_monitor(child: subprocess.Popen, demo: bool, log_path: str, supervisor: Supervisor) -> int:
    """The monitor has ended: by a stop signal (the job was told: wait for it), with the job
    (its code), or by q, a hangup or a reader that left (the job goes on; the demo's stops)."""
    supervisor.say_notes()
    if not supervisor.stopping and _still_running(child):
        if demo:
            _stop(child)
            tell(f"tuimon: the job's output is in {log_path}")
            return 0  # quitting the demo stops its job: that is the normal end
        if not under_init():
            tell(f"tuimon: the job's output is in {log_path}")
            tell(f"tuimon: the job (PID {child.pid}) goes on; watch it again with `tuimon attach {child.pid}`")
            return 0
        tell("tuimon: as PID 1 here (a container's entrypoint) its end would end the job, so it waits for the job "
             "(Ctrl-C or SIGTERM pass on to it)")
    code = supervisor.wait()
    tell(f"tuimon: the job's output is in {log_path}")
    if code != 0 and not supervisor.stopping:
        tail = launch.log_tail(log_path)
        if tail:
            tell("tuimon: its last lines:")
        for line in tail:
            tell(f"  {safe_text(line, 500)}")
    tell(f"tuimon: the job {how_it_ended(code)}")
    return exit_status(code)


def _stop(child: subprocess.Popen) -> None:
    child.send_signal(signal.SIGINT)  # the demo stops on KeyboardInterrupt, quietly
    try:
        child.wait(10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def metrics_url(port: int, addr: str) -> str:
    host = f"[{addr}]" if ":" in addr else addr
    return f"http://{host}:{port}/metrics"


def _follow_plain(child: subprocess.Popen, interval: float, exporter: Exporter | None,
                  baseline: tuple[str, Baseline] | None, log_path: str, supervisor: Supervisor) -> None:
    """One line per interval on stdout until the job ends, a stop signal or hangup comes, or
    nothing reads the lines any more (the job never shares this stdout: it writes to its log)."""
    session = LiveSession(child.pid, interval, popen=child, job_log=log_path)
    view = None
    try:
        with supervisor.monitoring(_raise_stop):
            view = textview.follow(session, interval, until=lambda: child.poll() is not None, baseline=baseline,
                                   launched=True, on_view=exporter.publish if exporter else None)
    except StopMonitoring:
        pass
    except BrokenPipeError:  # `| head`: the reader left; say the rest on stderr
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        tell("tuimon: nothing reads the monitor's lines any more: the monitor stops")
    if view is not None and view.training is None and child.poll() is not None:
        tell("tuimon: the job ended before its channel appeared")


def _still_running(child: subprocess.Popen) -> bool:
    """Whether the job runs on after the monitor ended. Not poll(): it answers None while another
    thread (the process sampler, which saw the job end) is inside its waitpid, and a finished job
    was told to "go on" (beside two CPU burners); a wait that takes the turn tells."""
    try:
        child.wait(timeout=EXIT_WAIT_S)
        return False
    except subprocess.TimeoutExpired:
        return True


def _raise_stop() -> None:
    raise StopMonitoring


def cmd_run(args: argparse.Namespace) -> int:
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    return run(cmd, args.headless, args.interval, args.plain, nsys=args.nsys, nsys_args=args.nsys_args,
               metrics=None if args.port is None else (args.port, args.addr), baseline=args.baseline)


def cmd_demo(args: argparse.Namespace) -> int:
    cmd = [sys.executable, "-m", "tuimon.workloads.demo_train", "--seconds", str(args.seconds)]
    return run(cmd, args.headless, args.interval, args.plain, demo=True)
