"""The job's wrapper: what `tuimon run` and `tuimon demo` do with the signals they get.

Rules (the README's table says the same):
- SIGTERM, SIGINT, SIGQUIT go on to the job's process group (tuimon starts every job in a session
  of its own, as torchrun starts its workers), and tuimon ends its monitor, waits for the job and
  ends with the job's code. Each further one goes on too; the second arms SIGKILL after
  KILL_GRACE_S, the third sends it at once.
- SIGHUP (the terminal is gone) ends the monitor only: a `run` job goes on (it has its own session
  and writes to its log), a demo job is stopped by the caller.
- As PID 1 (a container's entrypoint) tuimon also reaps the orphans the job leaves, as tini does.
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
import threading
import time

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

    def __init__(self):
        self.child: subprocess.Popen | None = None
        self.stop_signals: list[int] = []  # the stop signals received, in order
        self.hung_up = False
        self.kill_at: float | None = None
        self._hook = None
        self._notes: list[str] = []  # said by wait(), never by a handler
        self._previous: dict[int, object] = {}
        self._reaper: OrphanReaper | None = None

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
        if self._reaper is not None:
            self._reaper.stop()

    def adopt(self, child: subprocess.Popen) -> None:
        self.child = child
        if os.getpid() == 1:
            self._reaper = OrphanReaper(keep=child.pid)
            self._reaper.start()
        for sig in self.stop_signals:  # received while the job was being started
            self._forward(sig)

    @property
    def stopping(self) -> bool:
        """A stop signal came: the job was told, and tuimon ends with it."""
        return bool(self.stop_signals)

    @contextlib.contextmanager
    def monitoring(self, stop_hook):
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

    def _on_signal(self, signum, frame) -> None:
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
        while True:
            self.say_notes()
            try:
                return self.child.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
            if self.kill_at is not None and time.monotonic() >= self.kill_at:
                self.kill_at = None
                tell(f"tuimon: SIGKILL to the job (PID {self.child.pid} and its process group)")
                self._forward(signal.SIGKILL)


class OrphanReaper(threading.Thread):
    """As PID 1, processes the job leaves behind become tuimon's children: their zombies are
    reaped here. Only those outside tuimon's own session: they come from the job's tree (it has a
    session of its own), never from a command tuimon runs and waits for itself; the job (keep)
    is waited for by its Popen."""

    PERIOD_S = 0.5

    def __init__(self, keep: int):
        super().__init__(name="tuimon-reaper", daemon=True)
        self.keep, self.own_session = keep, os.getsid(0)
        self._done = threading.Event()

    def stop(self) -> None:
        self._done.set()

    def run(self) -> None:
        while not self._done.wait(self.PERIOD_S):
            for pid in self.orphan_zombies():
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    def orphan_zombies(self) -> list[int]:
        me, found = os.getpid(), []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == self.keep:
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    data = f.read()
            except OSError:
                continue
            fields = data[data.rfind(b")") + 2 :].split()  # state, ppid, pgrp, session, ...
            if len(fields) > 3 and fields[0] == b"Z" and int(fields[1]) == me and int(fields[3]) != self.own_session:
                found.append(int(name))
        return found


def dies_with_parent():
    """A preexec_fn for a job that must not outlive tuimon (the demo): the kernel sends it SIGKILL
    when the thread that started it ends, however tuimon ends (SIGKILL and crashes too). Start the
    job from the main thread, which lives as long as tuimon."""
    libc = ctypes.CDLL(None, use_errno=True)  # loaded here, before the fork
    parent = os.getpid()

    def in_child():
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # tuimon ended before the prctl: nobody would send it
            os._exit(1)

    return in_child
