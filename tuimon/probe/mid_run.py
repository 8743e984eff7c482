"""The probe loaded into a job that is already running (`tuimon inject`, `tuimon attach --inject`).

The injector's bootstrap (tuimon/inject/__init__.py: bootstrap) runs on the job's main thread at a safe point,
says so (PROGRESS) and starts a thread; that thread runs prepare(): it imports the probe (tens of milliseconds of
Python, interleaved with the loop by the interpreter's switch interval rather than stopping it),
then asks the interpreter to call install() on the main thread, between two bytecodes: the hooks
go in there, never from another thread while the loop may be iterating the very hook dictionaries
they join. Everything is caught: on any failure the job goes on untouched, and the result file says
what failed.

What a probe loaded mid-run sees: hooks on the modules and optimizers that already exist (torch's
global module hooks, the optimizer classes' steps), DataLoader iterators already running (their
class's __next__), the process group's collectives, CUDA events, syncs, the op counter, the line
sampler, captures, stalls and the step in progress. Steps are counted from the first whole step
after the load (Probe.mid_run). A job that has compiled with torch.compile keeps its graphs: no
global module hook is added (dynamo guards on them), and compiled modules are timed at their own
boundary."""

from __future__ import annotations

import os
import sys
from types import FrameType

_callbacks: list = []  # the pending calls' ctypes callbacks: kept for good (C calls through them)


def say(result: str, text: str) -> None:
    """Write the result file the injector waits for (once: an existing file is left alone)."""
    try:
        fd = os.open(result, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError:
        return
    try:
        os.write(fd, text.encode(errors="replace")[:4000])
    finally:
        os.close(fd)


def progress(result: str, stage: str) -> None:
    """Say how far the load got (a file beside the result, rewritten): what the injector reports
    if the result has not come when it stops waiting. Stages: PROGRESS."""
    try:
        fd = os.open(result + ".progress", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError:
        return
    try:
        os.write(fd, stage.encode())
    finally:
        os.close(fd)


# "loading" and "loading importing" are written by the bootstrap (tuimon/inject), on the main thread, as it
# starts the loading thread (the main thread ran Python then, inside an import or not); "scheduled" once
# the probe is imported and install() asked of the main thread; the last when install() was put off
PROGRESS = ("loading", "loading importing", "scheduled", "importing EVERY_S LEFT_S")


def prepare(result: str, shm_dir: str | None) -> None:
    """(tuimon's loading thread) The probe imported; install() asked of the main thread."""
    try:
        if "torch" not in sys.modules:
            return say(result, "failed: the process has not imported torch")
        _import_gently()
        from . import api
        from .state import probe

        if probe is not None:
            return say(result, f"failed: the probe already runs in this process ({api.status().path})")
        progress(result, "scheduled")
        _schedule(result, shm_dir, RETRIES)
    except BaseException as e:  # noqa: BLE001 - never into the job
        say(result, f"failed: {type(e).__name__}: {e}")


# The probe's modules, each imported before those that import it: one at a time, with a sleep between,
# so the loop has the GIL back between two (an import holds it for its 1-6 ms; all of them at once
# would stop a loop that needs the GIL for ~50 ms). tests/test_inject.py checks that nothing is left
# for the main thread to import.
MODULES = ("channel.layout", "channel.procinfo", "channel.ring", "channel.errors", "channel.meta", "channel.paths",
           "channel.writer", "probe.state", "probe.hooks", "probe.anatomy", "channel.fileview", "channel.control",
           "probe.present", "probe.sampler", "channel.text", "probe.graphs", "probe.capture", "probe.core",
           "probe.api", "probe.comm", "probe.copies", "probe.torch_hooks", "probe.ops", "probe.gpu_timing")
IMPORT_GAP_S = 0.02


def _import_gently() -> None:
    import importlib
    import sysconfig
    import time

    for name in MODULES:
        if f"tuimon.{name}" not in sys.modules:
            importlib.import_module(f"tuimon.{name}")
            time.sleep(IMPORT_GAP_S)
    sysconfig.get_paths()  # (the line names' library folders: its first call imports a large module)


RETRIES = 100  # install() put off while the main thread imports: asked again every RETRY_S, this often at most
RETRY_S = 0.2


def _schedule(result: str, shm_dir: str | None, tries: int) -> None:
    """Have the interpreter call install() on its main thread at its next safe point."""
    import ctypes

    callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(lambda _: install(result, shm_dir, tries))
    _callbacks.append(callback)
    add = ctypes.pythonapi.Py_AddPendingCall
    add.argtypes, add.restype = [type(callback), ctypes.c_void_p], ctypes.c_int
    if add(callback, None) != 0:
        say(result, "failed: the interpreter's queue of pending calls is full; try again")


def install(result: str, shm_dir: str | None, tries: int = 0) -> int:
    """(the main thread, between two bytecodes) Install the probe; 0 whatever happens (a pending call
    that returns -1 raises into whatever the main thread runs next). Not inside an import (torch's
    own, half done, would be patched half-made): put off, then asked again from a thread."""
    try:
        if _importing():
            if tries <= 0:
                say(result, "failed: the job's main thread was importing modules all along; try again")
                return 0
            progress(result, f"importing {RETRY_S:g} {tries * RETRY_S:g}")
            import threading
            import time

            def later() -> None:
                time.sleep(RETRY_S)
                try:
                    _schedule(result, shm_dir, tries - 1)
                except BaseException as e:  # noqa: BLE001
                    say(result, f"failed: {type(e).__name__}: {e}")

            threading.Thread(target=later, name="tuimon-load", daemon=True).start()
            return 0
        from . import api

        status = api.instrument(directory=shm_dir, mid_run=True)
        if status.enabled:
            say(result, f"ok {status.path}")
        else:
            say(result, f"failed: {status.reason}")
    except BaseException as e:  # noqa: BLE001
        say(result, f"failed: {type(e).__name__}: {e}")
    return 0


def _importing() -> bool:
    """Whether this thread is inside an import: a module's top-level code (other than __main__'s,
    where a loop written at module level runs) on its stack."""
    f: FrameType | None = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == "<module>" and f.f_globals.get("__name__") != "__main__":
            return True
        f = f.f_back
    return False
