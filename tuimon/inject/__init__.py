"""Load tuimon's probe into a running CPython process, when the user asks (`tuimon inject PID`,
`tuimon attach PID --inject`). Never unasked: it changes the process.

How (docs/injection.md says why this way):
- Python 3.10 to 3.13: pyinjector (ptrace) loads tuimon's loader library (_loader.c) into the
  process; its constructor schedules a pending call (and asks for the GIL once, so that the main thread
  sees it: _loader.c); the interpreter runs it on its main thread at a safe point: the bootstrap below;
- Python 3.14 and later: sys.remote_exec (PEP 768), asked through the process's own interpreter,
  runs the same bootstrap at the interpreter's own safe point.
The bootstrap starts one thread that imports tuimon's probe from tuimon's own install (by path: the
job's sys.path is not changed) and has the main thread install it (tuimon/probe/mid_run.py); it
writes a result file, which inject() waits for. Everything the process runs of it catches every
exception: on failure the job goes on untouched and the result says what failed."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib.machinery import EXTENSION_SUFFIXES

from ..channel.paths import segment_path, shm_dir
from . import threads
from .target import Refused, Target, check

__all__ = ["WHAT_IT_DOES", "Injected", "NotLoaded", "Outcome", "Pending", "Refused", "check", "inject", "load_each",
           "loader_path"]

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the folder that holds tuimon/ (its install, not the job's)
WAIT_S = 15.0

# What loading costs, said before it is done (the TUI's `i` line; docs/injection.md has the numbers behind it)
WHAT_IT_DOES = "load tuimon's probe (ptrace; a pause of a few ms, then ~1% of step time)"  # (fits 80 columns)


@dataclass(frozen=True)
class Injected:
    pid: int
    channel: str  # the probe's segment
    seconds: float  # from the request until the probe ran


class NotLoaded(Exception):
    """Injection was tried and the probe does not run (str: why); the job goes on untouched."""


class Pending(NotLoaded):
    """The load is queued in the process but its main thread has run no Python since: it happens
    when that thread comes back to Python (then `tuimon attach PID` shows the probe)."""


@dataclass(frozen=True)
class Outcome:
    """One process's load: loaded, or why not (pending: queued in it, not refused)."""
    pid: int
    loaded: Injected | None = None
    why: str = ""
    pending: bool = False


def load_each(pids: Iterable[int], wait_s: float = WAIT_S, cancel: threading.Event | None = None) -> Iterator[Outcome]:
    """inject() into each process in turn (a launcher's ranks), an Outcome each as it is known: the
    one path of `tuimon inject`, `attach --inject` and the TUI's `i`. cancel: as inject's; once set,
    the processes not yet loaded are left alone."""
    for pid in pids:
        if cancel is not None and cancel.is_set():
            yield Outcome(pid, why="not tried: tuimon stopped first")
            continue
        try:
            done = inject(pid, wait_s, cancel=cancel)
        except Pending as e:
            yield Outcome(pid, why=str(e), pending=True)
        except (Refused, NotLoaded) as e:
            yield Outcome(pid, why=str(e))
        else:
            yield Outcome(pid, loaded=done)


def loader_path() -> str | None:
    """The loader library built with tuimon (setup.py), or None."""
    for suffix in EXTENSION_SUFFIXES:
        path = os.path.join(HERE, "_loader" + suffix)
        if os.path.isfile(path):
            return path
    return None


def bootstrap(result: str, directory: str) -> str:
    """The code the process runs at its safe point: one top-level expression (it binds nothing in the
    job's __main__), which starts the loading thread and returns."""
    body = f"""
import sys, threading
def _stage():
    # Said at once, on the main thread (the loading thread's imports can take seconds on a busy machine):
    # the main thread has run Python, and whether it is inside an import (mid_run._importing's rule, from
    # the frame it was stopped in: frames 0-2 are this function, the bootstrap and the code that ran it)
    try:
        f = sys._getframe(3)
    except ValueError:
        return "loading"
    while f is not None:
        if f.f_code.co_name == "<module>" and f.f_globals.get("__name__") != "__main__":
            return "loading importing"
        f = f.f_back
    return "loading"
try:
    import os
    fd = os.open({result!r} + ".progress", os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    os.write(fd, _stage().encode())
    os.close(fd)
except BaseException:
    pass
def _load():
    try:
        tuimon = sys.modules.get("tuimon")
        if tuimon is None:
            import importlib.util, os
            spec = importlib.util.spec_from_file_location("tuimon", os.path.join({ROOT!r}, "tuimon", "__init__.py"),
                                                          submodule_search_locations=[os.path.join({ROOT!r}, "tuimon")])
            tuimon = importlib.util.module_from_spec(spec)
            sys.modules["tuimon"] = tuimon
            spec.loader.exec_module(tuimon)
        from tuimon.probe import mid_run
        mid_run.prepare({result!r}, {directory!r})
    except BaseException as e:
        try:
            import os
            fd = os.open({result!r}, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, ("failed: " + type(e).__name__ + ": " + str(e)).encode()[:4000])
            os.close(fd)
        except BaseException:
            pass
threading.Thread(target=_load, name="tuimon-load", daemon=True).start()
"""
    return f"exec({body!r}, {{'__name__': 'tuimon-inject', '__builtins__': __builtins__}})\n"


def inject(pid: int, wait_s: float = WAIT_S, directory: str | None = None,
           cancel: threading.Event | None = None, need_torch: bool = True) -> Injected:
    """Load the probe into process pid. Refused (nothing done) or NotLoaded (tried; the job untouched).
    cancel: once set, stop waiting for the probe to start (Pending: the load stays queued in the job);
    the load itself, a few milliseconds of ptrace, is never cut short. need_torch=False: any CPython
    (target.check)."""
    target = check(pid, need_torch)
    directory = directory or shm_dir()
    work = tempfile.mkdtemp(prefix=f"tuimon-inject-{pid}-")  # (mode 0700: the loader runs only files of ours)
    keep = False
    try:
        t0 = time.monotonic()
        result = os.path.join(work, "result")
        _start(target, work, bootstrap(result, directory))
        try:
            text = _wait(result, pid, wait_s, cancel)
        except Pending:
            keep = True  # (the call is queued: its files must be there when the main thread runs it)
            raise
        if not text.startswith("ok "):
            raise NotLoaded(text.removeprefix("failed: "))
        return Injected(pid=pid, channel=text[3:].strip() or segment_path(pid, target.uid, directory),
                        seconds=time.monotonic() - t0)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def _start(target: Target, work: str, code: str) -> None:
    if target.how == "remote_exec":
        script = os.path.join(work, "boot.py")
        _write(script, code)
        ask = subprocess.run([target.exe, "-I", "-S", "-c", "import sys; sys.remote_exec(int(sys.argv[1]), sys.argv[2])",
                              str(target.pid), script], capture_output=True, text=True, timeout=30)
        if ask.returncode != 0:
            raise NotLoaded(f"sys.remote_exec refused: {ask.stderr.strip().splitlines()[-1:] or ask.returncode}")
        return
    loader = loader_path()
    if loader is None:
        raise Refused("tuimon's loader library was not built (no C compiler when tuimon was installed): "
                      "reinstall tuimon where a compiler exists (`pip install -e .` builds it)")
    try:
        import pyinjector
    except ImportError:
        raise Refused("pyinjector is not installed (pip install pyinjector; Linux x86_64 and aarch64)") from None
    lib = os.path.join(work, "loader.so")  # a copy per injection: the loader reads the .py beside it
    shutil.copyfile(loader, lib)
    _write(os.path.join(work, "loader.py"), code)
    try:
        threads.load_on_a_quiet_thread(pyinjector, target.pid, lib.encode())
    except threads.NoQuietThread as e:
        raise NotLoaded(str(e)) from None
    except Exception as e:  # noqa: BLE001 - pyinjector's errors say what ptrace refused
        raise NotLoaded(f"the injector failed: {e}".splitlines()[0]) from None


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _wait(result: str, pid: int, wait_s: float, cancel: threading.Event | None = None) -> str:
    """The bootstrap's result, once written; NotLoaded if the process ends, Pending once wait_s passes
    or cancel is set."""
    end = time.monotonic() + wait_s
    while time.monotonic() < end and not (cancel is not None and cancel.is_set()):
        try:
            with open(result) as f:
                text = f.read()
            if text:
                return text
        except FileNotFoundError:
            pass
        if not os.path.exists(f"/proc/{pid}"):
            raise NotLoaded(f"process {pid} ended before the probe ran")
        time.sleep(0.02)
    if cancel is not None and cancel.is_set():
        raise Pending("no longer waited for: the load is queued in the job and happens when its main thread runs "
                      f"Python next (then `tuimon attach {pid}` shows the probe)")
    raise Pending(f"the probe did not start within {wait_s:g} s: {_why_pending(result)}")


def _why_pending(result: str) -> str:
    """Where the load stands, from the progress the bootstrap and the loading thread wrote
    (mid_run.PROGRESS)."""
    try:
        with open(result + ".progress") as f:
            stage = f.read()
    except OSError:
        stage = ""
    if stage == "loading":
        return "the probe's modules are still being imported in the job (a busy machine); it loads once they are"
    if stage == "scheduled":
        return ("the probe is imported and its install waits for the job's main thread, which has run no Python "
                "since (blocked in a call: a sync, a collective, a sleep); it loads when that call returns")
    if stage == "loading importing":
        return ("the job's main thread has been importing modules since (its own start, still under way?), and the "
                "probe's own modules are still being imported beside it (a busy machine); it loads once both are done")
    if stage.startswith("importing"):  # "importing EVERY_S LEFT_S"
        every, left = (stage.split() + ["?", "?"])[1:3]
        return (f"the job's main thread has been importing modules since (its own start, still under way?); the load "
                f"is asked again every {every} s, for {left} s more")
    return ("the job's main thread has run no Python since (blocked in a call: a sync, a collective, a sleep); it "
            "loads when that call returns")
