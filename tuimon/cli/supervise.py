"""The job's wrapper: what `tuimon run` and `tuimon demo` do with the signals they get.

Rules (the README's table says the same):
- SIGTERM, SIGINT, SIGQUIT go on to the job's process group (tuimon starts every job in a session
  of its own, as torchrun starts its workers), and tuimon ends its monitor, waits for the job and
  ends with the job's code. Each further one goes on too; the second arms SIGKILL after
  KILL_GRACE_S, the third sends it at once.
- SIGHUP (the terminal is gone) ends the monitor only: a `run` job goes on (it has its own session
  and writes to its log), a demo job is stopped by the caller.
- As PID 1 (a container's entrypoint) tuimon forks: PID 1 reaps the orphans the job leaves and
  passes signals on to its child, which is tuimon as above (serve_as_init), as tini does.
A handler only forwards, counts and calls the monitor's stop hook; printing is left to wait(),
on the main thread outside any handler.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None  # what signal.signal() returns
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
KILL_GRACE_S = 10.0  # from the second stop signal to SIGKILL (docker stop's default)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class StopMonitoring(KeyboardInterrupt):
    """Raised on the main thread by a stop signal or a hangup while a plain-text monitor runs
    (so a long --interval sleep ends at once); a KeyboardInterrupt, which the monitor's loop
    already ends on."""


def tell(line: str) -> None:
    """A notice on stderr, unless the terminal is gone (SSH dropped: EIO): what follows must run."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass


class Supervisor:
    """Installs the handlers (before the job starts: a signal that comes first is passed on once
    it has), then adopt(child) and, while a monitor runs, `with monitoring(stop_hook)`."""

    def __init__(self) -> None:
        self.child: subprocess.Popen | None = None
        self.stop_signals: list[int] = []  # the stop signals received, in order
        self.hung_up = False
        self.kill_at: float | None = None
        self._hook: Callable[[], None] | None = None
        self._notes: list[str] = []  # said by wait(), never by a handler
        self._previous: dict[int, Handler] = {}

    # -- set-up ------------------------------------------------------------------------------------

    def install(self) -> None:
        for sig in (*STOP_SIGNALS, signal.SIGHUP):
            if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
                continue  # nohup: the hangup is ignored by tuimon and the job alike
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def adopt(self, child: subprocess.Popen) -> None:
        self.child = child
        for sig in self.stop_signals:  # received while the job was being started
            self._forward(sig)
        if self.stop_signals:
            self._notes.append(f"tuimon: {signal.Signals(self.stop_signals[0]).name} as the job started: passed on "
                               f"to it (PID {child.pid} and its process group); waiting for it to end")

    @property
    def stopping(self) -> bool:
        """A stop signal came: the job was told, and tuimon ends with it."""
        return bool(self.stop_signals)

    @contextlib.contextmanager
    def monitoring(self, stop_hook: Callable[[], None]) -> Iterator[None]:
        """While inside, the first stop signal or a hangup calls stop_hook() (from the handler, on
        the main thread: it may only schedule work or raise). Called at once if one already came."""
        self._hook = stop_hook
        try:
            if self.stopping or self.hung_up:
                self._call_hook()
            yield
        finally:
            self._hook = None

    # -- the handler ---------------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if signum == signal.SIGHUP:
            self.hung_up = True
            self._call_hook()
            return
        self.stop_signals.append(signum)
        n = len(self.stop_signals)
        if self.child is None:
            return  # passed on by adopt()
        self._forward(signum)
        if n == 1:
            self._notes.append(f"tuimon: {name}: passed on to the job (PID {self.child.pid} and its process group); "
                               f"waiting for it to end (a second SIGTERM or Ctrl-C: SIGKILL {KILL_GRACE_S:g} s later)")
            self._call_hook()
        elif n == 2:
            self.kill_at = time.monotonic() + KILL_GRACE_S
            self._notes.append(f"tuimon: {name} again: passed on; the job gets SIGKILL in {KILL_GRACE_S:g} s if it "
                               "has not ended (once more: at once)")
        else:
            self.kill_at = time.monotonic()

    def _call_hook(self) -> None:
        hook, self._hook = self._hook, None
        if hook is not None:
            hook()

    def _forward(self, signum: int) -> None:
        if self.child is None:
            return  # (not adopted yet)
        try:
            os.killpg(self.child.pid, signum)  # the job is its process group's leader
        except (ProcessLookupError, PermissionError):
            pass  # ended already

    # -- waiting -------------------------------------------------------------------------------------

    def say_notes(self) -> None:
        while self._notes:
            tell(self._notes.pop(0))

    def wait(self) -> int:
        """Wait for the job, saying what the handlers did and sending SIGKILL when its time
        comes; the job's return code (negative: the signal that ended it)."""
        child = self.child
        assert child is not None, "adopt(child) first"
        while True:
            self.say_notes()
            try:
                code = child.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                code = None
            if code is not None:
                self.say_notes()
                return code
            if self.kill_at is not None and time.monotonic() >= self.kill_at:
                self.kill_at = None
                tell(f"tuimon: SIGKILL to the job (PID {child.pid} and its process group)")
                self._forward(signal.SIGKILL)


_under_init = False  # this tuimon is the child of one that stays PID 1 (serve_as_init)


def under_init() -> bool:
    """tuimon's end would end the job: it is PID 1's child in a PID namespace, whose init ends when
    its child does, and takes every process of the namespace with it."""
    return _under_init


def serve_as_init() -> int | None:
    """As PID 1 (a container's entrypoint), do what tini does: fork; the parent stays PID 1,
    passes the stop signals and hangups on to its child, reaps every zombie (orphans of the job
    are re-parented to it) and returns the child's exit status. The child returns None and goes
    on as tuimon (its Popen objects are never raced by the reaper). Call before any thread starts."""
    global _under_init
    child = os.fork()
    if child == 0:
        _under_init = True
        _take_the_terminal()
        return None

    def forward(signum: int, frame: FrameType | None) -> None:
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for sig in (*STOP_SIGNALS, signal.SIGHUP):
        if signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, forward)
    while True:
        pid, status = os.wait()  # any child: tuimon, or an orphan to reap
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code


def _take_the_terminal() -> None:
    """A process group of its own, in the terminal's foreground where there is one (as tini
    isolates its child): the terminal's Ctrl-C then reaches tuimon once, not also through PID 1."""
    os.setpgid(0, 0)
    try:
        if os.isatty(0):
            previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # (a background group asks)
            try:
                os.tcsetpgrp(0, os.getpgrp())
            finally:
                signal.signal(signal.SIGTTOU, previous)
    except OSError:
        pass  # not our controlling terminal: nothing to take


def dies_with_parent() -> Callable[[], None]:
    """A preexec_fn for a job that must not outlive tuimon (the demo): the kernel sends it SIGKILL
    when the thread that started it ends, however tuimon ends (SIGKILL and crashes too). Start the
    job from the main thread, which lives as long as tuimon."""
    libc = ctypes.CDLL(None, use_errno=True)  # loaded here, before the fork
    parent = os.getpid()

    def in_child() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # tuimon ended before the prctl: nobody would send it
            os._exit(1)

    return in_child
