"""Nsight Systems windows through an interactive session: the job runs under `nsys launch
--session-new=NAME` (tracing set up once, at launch), and each window is `nsys start` at a step
boundary and `nsys stop` after N steps (or T seconds), run from the monitor. Each stop writes a
complete report while the job goes on (docs/nsys-sessions.md: what this does on an H100).

SessionWindows has CaptureClient's interface (request, status, wait, close), so the screen,
`tuimon capture` and `--once` follow either the same way."""

from __future__ import annotations

import fcntl
import os
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..channel.control import MAX_SECONDS
from ..channel.paths import safe_file_part
from ..channel.text import safe_text
from ..model import CaptureStatus
from .client import CaptureRefused, check_free_space, check_request
from .commands import CommandFailed, run
from .monitor_run import MonitorRunWindows

if TYPE_CHECKING:
    from ..channel.reader import SegmentInfo

# From `nsys launch --help` and `nsys start --help` (2025.3.1): which options each takes.
LAUNCH_OPTIONS = {
    "--command-file", "--cuda-event-trace", "--cuda-flush-interval", "--cuda-graph-trace", "--cuda-memory-usage",
    "--cuda-trace-all-apis", "--cuda-um-cpu-page-faults", "--cuda-um-gpu-page-faults", "--cudabacktrace", "--dask",
    "-e", "--env-var", "--hotkey-capture", "--mpi-impl", "-n", "--inherit-environment", "--opengl-gpu-workload",
    "--osrt-backtrace-stack-size", "--osrt-backtrace-threshold", "--osrt-threshold", "-p", "--nvtx-capture",
    "--python-backtrace", "--python-functions-trace", "--python-sampling", "--python-sampling-frequency", "--pytorch",
    "--resolve-symbols", "--run-as", "-t", "--trace", "--trace-fork-before-exec", "--vulkan-gpu-workload", "-w",
    "--show-output", "--wait",
}
START_OPTIONS = {
    "-b", "--backtrace", "--cpu-core-events", "--cpuctxsw", "--debug-symbols", "--event-sample",
    "--event-sampling-interval", "--export", "--ftrace", "--ftrace-keep-user-config", "--gpu-metrics-devices",
    "--gpu-metrics-frequency", "--gpu-metrics-set", "--gpu-video-device", "--gpuctxsw", "--ib-net-info-devices",
    "--ib-net-info-files", "--ib-net-info-output", "--nic-metrics", "--os-events", "-s", "--sample",
    "--samples-per-backtrace", "--sampling-period", "--stats",
}
OURS = {"-o", "--output", "-f", "--force-overwrite", "--session", "--session-new", "-c", "--capture-range",
        "--capture-range-end", "-x", "--stop-on-exit", "--flush-on-cudaprofilerstop"}
TRACE = "--trace=cuda,nvtx,osrt"
# Said up front (the panel at idle, `tuimon capture`): what a window costs the job, measured on an
# H100 with a 13 ms step (README, Captures): the step in which `nsys stop` begins is the slow one.
COST_NOTE = ("the first window of an nsys session slows one step by ~35 ms as it stops (one-time set-up); "
             "later windows ~10 ms")
STOP_TIMEOUT_S = 180.0  # `nsys stop` writes the report: ~8 s for a 2 s window on an H100
STEP_WAIT_S = MAX_SECONDS  # a window in steps over a loop that stopped stepping ends after this


class NsysArgsError(ValueError):
    pass


def split_args(args: list[str]) -> tuple[list[str], list[str]]:
    """--nsys-args split into `nsys launch` options and `nsys start` options, each as
    --option=value. Raises NsysArgsError for an option tuimon sets itself or neither takes."""
    launch: list[str] = []
    start: list[str] = []
    i = 0
    while i < len(args):
        opt, eq, value = args[i].partition("=")
        if not opt.startswith("-"):
            raise NsysArgsError(f"--nsys-args: {args[i]!r} is not an option (the command goes after --)")
        if eq:
            tokens = [args[i]]
        elif i + 1 < len(args) and not args[i + 1].startswith("-"):  # its value, as the next word
            i += 1
            tokens = [f"{opt}={args[i]}"] if opt.startswith("--") else [opt, args[i]]
        else:
            tokens = [opt]
        i += 1
        if opt in OURS:
            raise NsysArgsError(f"--nsys-args: tuimon sets {opt} itself (each window gets its own report)")
        if opt in LAUNCH_OPTIONS:
            launch += tokens
        elif opt in START_OPTIONS:
            start += tokens
        else:
            raise NsysArgsError(f"--nsys-args: {opt} is neither an `nsys launch` nor an `nsys start` option")
    return launch, start


def session_name() -> str:
    """Unique per tuimon run: two jobs under nsys at once get two sessions."""
    return f"tuimon-{os.getuid()}-{os.getpid()}-{os.urandom(3).hex()}"


def launch_command(nsys: str, session: str, cmd: list[str], launch_args: Sequence[str] = ()) -> list[str]:
    own_trace = any(a.split("=", 1)[0] in ("-t", "--trace") for a in launch_args)
    return [nsys, "launch", f"--session-new={session}", *([] if own_trace else [TRACE]), *launch_args, *cmd]


class NsysSession:
    def __init__(self, nsys: str, name: str):
        self.nsys, self.name = nsys, name

    def _call(self, *args: str, timeout: float) -> None:
        done = run([self.nsys, *args, f"--session={self.name}"], timeout)
        if done.returncode != 0:
            said = (done.stderr.strip() or done.stdout.strip()).splitlines()
            raise CommandFailed(f"nsys {args[0]} failed ({done.returncode}): {safe_text(said[-1] if said else '', 300)}")

    def start(self, output: str, start_args: Sequence[str] = (), timeout: float = 60) -> None:
        self._call("start", "-o", output, "--force-overwrite=true", *start_args, timeout=timeout)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        self._call("stop", timeout=timeout)

    def stop_detached(self) -> None:
        """Stop a collection without waiting for its report (the monitor is quitting)."""
        try:
            subprocess.Popen([self.nsys, "stop", f"--session={self.name}"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            pass

    def shutdown(self, timeout: float = 30) -> None:
        """End the session (the job goes on untraced). A session that already ended with its job
        is not an error."""
        try:
            run([self.nsys, "shutdown", f"--session={self.name}"], timeout)
        except CommandFailed:
            pass


class SessionWindows(MonitorRunWindows):
    """Windows of one job's session, each on a thread of its own (nsys stop takes seconds)."""

    POLL_S = 0.005  # a step boundary is seen within this
    FAILED = CommandFailed

    def __init__(self, session: NsysSession, pid: int, program: str, steps_now: Callable[[], int],
                 alive: Callable[[], bool], start_args: Sequence[str] = (), lock_path: str | None = None):
        self.session, self.pid, self.program = session, pid, program
        self.steps_now, self.alive, self.start_args = steps_now, alive, list(start_args)
        self.lock_path = lock_path  # the job's segment: locked by the monitor whose window runs
        self._status = CaptureStatus(seq=0, state="idle", kind="nsys", message=COST_NOTE)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._collecting = False

    def status(self) -> CaptureStatus:
        return self._status

    def _set(self, **kw: Any) -> None:
        s = self._status
        self._status = CaptureStatus(seq=kw.get("seq", s.seq), state=kw.get("state", s.state), kind="nsys",
                                     first_step=kw.get("first_step", s.first_step),
                                     last_step=kw.get("last_step", s.last_step),
                                     message=kw.get("message", s.message), path=kw.get("path", s.path),
                                     updated_ns=time.monotonic_ns())

    def request(self, steps: int | None = None, seconds: float | None = None, kind: int = 0) -> int:
        """kind: 0 only (the session's own, nsys); a memory window is the probe's (CaptureClient)."""
        if kind:
            raise CaptureRefused("this job's windows are its nsys session's here: a memory window is its "
                                 "probe's (`tuimon capture PID --memory`)")
        check_request(self.pid, self.alive(), steps, seconds)
        with self._lock:
            if self._status.busy:
                what = "being written (nsys stop writes the report)" if self._status.state == "writing" else \
                    self._status.state
                raise CaptureRefused(f"nsys window {self._status.seq} is {what}: one at a time")
            folder = check_free_space()
            lock = self._lock_job()
            seq = self._status.seq + 1
            base = os.path.join(folder, f"{safe_file_part(self.program)}-{self.pid}-nsys{seq}-"
                                        f"{time.strftime('%Y%m%d-%H%M%S')}")
            self._set(seq=seq, state="armed", first_step=0, last_step=0, path="",
                      message="starts at the next step" if steps else f"{seconds:g} s")
        threading.Thread(target=self._window, args=(seq, base, steps, seconds, lock), name="tuimon-nsys-window",
                         daemon=True).start()
        return seq

    def _lock_job(self) -> int | None:
        """An exclusive lock on the job's segment for the window's life: another monitor of the same
        job (the TUI, and `tuimon capture` in a second terminal) cannot open a window on top of it.
        (flock: released by the kernel if this monitor dies.)"""
        if self.lock_path is None:
            return None
        try:
            fd = os.open(self.lock_path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None  # (the segment went away with the job: check_request said so already)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise CaptureRefused("another tuimon is taking an nsys window of this job: one at a time") from None
        return fd

    def _window(self, seq: int, base: str, steps: int | None, seconds: float | None, lock: int | None) -> None:
        try:
            if steps is not None:
                at = self.steps_now()
                self._until(lambda: self.steps_now() > at, STEP_WAIT_S)  # the next step boundary
            t0 = time.monotonic()
            self.session.start(base, self.start_args)
            self._collecting = True
            first = self.steps_now() + 1  # the first step that runs wholly inside the window
            self._set(state="capturing", first_step=first, last_step=first - 1,
                      message=f"nsys started in {time.monotonic() - t0:.2f} s")
            if steps is not None:
                ended = self._until(lambda: self._progress(first) >= first + steps - 1, STEP_WAIT_S)
                note = "" if ended else f"; the job stopped stepping: closed after {STEP_WAIT_S:g} s"
            else:
                assert seconds is not None  # (check_request: steps or seconds)
                end = time.monotonic() + seconds
                self._until(lambda: self._progress(first) < 0 or time.monotonic() >= end, seconds + 1)
                note = ""
            last = self.steps_now()
            self._set(state="writing", last_step=last, message="nsys stop: writing the report")
            t1 = time.monotonic()
            self._collecting = False
            self.session.stop()
            report = base + ".nsys-rep"
            if not os.path.exists(report):
                raise CommandFailed(f"nsys stop succeeded but wrote no {os.path.basename(report)}")
            self._set(state="done", path=report, message=f"report written in {time.monotonic() - t1:.1f} s, "
                                                         f"while the job runs{note}")
        except CommandFailed as e:
            self._set(state="failed", message=f"{e}; {_after(e)}")
        except Exception as e:  # noqa: BLE001 - a bug here must not end the monitor
            self._set(state="failed", message=f"{type(e).__name__}: {e}"[:300])
        finally:
            if lock is not None:
                os.close(lock)  # (releases the flock)

    def _progress(self, first: int) -> int:
        n = self.steps_now()
        if n >= first:
            self._set(last_step=n)
        return n

    def close(self) -> None:
        """The monitor is quitting: a collection still running is stopped (its report is still
        written, by nsys, without us waiting)."""
        self._closed.set()
        if self._collecting:
            self.session.stop_detached()


def _after(e: CommandFailed) -> str:
    """What a failed window means for the job. nsys's agent killed mid-window (H100): stop says
    "There are no active sessions", and the job, a child of `nsys launch`, ended ~8 s later."""
    said = str(e).lower()
    if "no active sessions" in said or "not found" in said:
        return "the nsys session is gone (nsys killed or ended): no more windows, and the job may end with it"
    return "the job goes on"


def for_job(info: SegmentInfo, steps_now: Callable[[], int]) -> SessionWindows | None:
    """The windows of a job launched in an nsys session (`tuimon run --nsys`), from its segment's
    metadata; None for any other job (its windows go through the probe's control block)."""
    from ..channel import procinfo
    from ..channel.paths import program_name
    from .nsys import find_nsys

    meta = info.meta
    name = meta.nsys_session
    if not name:
        return None
    tool = find_nsys()
    if tool is None:
        raise CaptureRefused(f"the job runs in nsys session {safe_text(name, 80)}, but nsys is not found here")
    start_args = list(meta.nsys_start_args)
    return SessionWindows(NsysSession(tool, name), info.pid, program_name(list(meta.argv)),
                          steps_now, lambda: procinfo.process_state(info.pid, info.start_ticks) == "alive", start_args,
                          lock_path=info.path)
