"""Capture windows inside the training process, asked for through the control block.

A window opens at the next step boundary and closes after N steps, or runs T seconds (loops
without steps): a torch.profiler window whose trace is exported on a background thread, off the
training step. (Under `tuimon run --nsys` the job runs in an nsys session whose windows the monitor
starts and stops itself: requests that reach the probe are refused.) One window at a time; lengths are capped; a window is
refused when the captures folder has less free space than the floor.

At interpreter exit (atexit; a KeyboardInterrupt or a handled SIGTERM ends there too) a window
still open is closed and written, and an export under way is waited for: torch's profiler left on
at shutdown crashes the process (SIGSEGV), and the job must keep its own exit code. The window's
state then says the job ended inside it. A process killed outright runs no atexit and cannot crash
in torch's shutdown either.
"""

from __future__ import annotations

import atexit
import gzip
import os
import sys
import threading
import time

from ..channel import layout as L
from ..channel.control import KIND_NSYS, KIND_TORCH, MAX_SECONDS, MAX_STEPS, ControlBlock
from ..channel.fileview import MappedView
from ..channel.paths import capture_floor_bytes, captures_dir, free_bytes, program_name, safe_file_part


class TorchWindow:
    def __init__(self, base: str, all_threads: bool = False):
        """all_threads: the window is opened off the training thread (a window in seconds, from
        the control thread): the profiler only records the thread that started it unless told
        otherwise (torch >= 2.7's profile_all_threads); older torch records that thread only."""
        import torch
        from torch.profiler import ProfilerActivity, profile

        if torch.autograd.profiler._is_profiler_enabled:  # one Kineto session per process
            raise RuntimeError("the job's own torch.profiler is running: try again once it has stopped")
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        self.trace = base + ".pt.trace.json.gz"
        self.prof = profile(activities=acts, **_all_threads_config() if all_threads else {})
        self.off_thread = all_threads
        self.prof.start()
        self.stop_ms = 0.0
        self.stopped_where = ""

    def stop(self, at_exit: bool = False) -> None:
        t = time.perf_counter()
        self.prof.stop()  # on the training thread: torch needs it where it started
        self.stop_ms = (time.perf_counter() - t) * 1e3
        self.stopped_where = "at exit" if at_exit else "off the loop" if self.off_thread else "on the training step"

    def finish(self) -> tuple[str, str]:
        """Export (background thread); returns (path, message). The summary is the monitor's job,
        read from the trace: key_averages() here would hold the GIL for the training thread."""
        t = time.perf_counter()
        tmp = self.trace[: -len(".gz")]
        self.prof.export_chrome_trace(tmp)
        with open(tmp, "rb") as src, gzip.open(self.trace, "wb", compresslevel=3) as dst:
            dst.write(src.read())
        os.unlink(tmp)
        export_ms = (time.perf_counter() - t) * 1e3
        self.prof = None
        size = os.path.getsize(self.trace)
        return self.trace, (f"trace {_size(size)}; stopped in {self.stop_ms:.0f} ms {self.stopped_where}, "
                            f"exported in {export_ms:.0f} ms" + (" off it" if self.stopped_where != "at exit" else ""))


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.0f} KiB"


def _all_threads_config() -> dict:
    try:
        from torch._C._profiler import _ExperimentalConfig

        return {"experimental_config": _ExperimentalConfig(profile_all_threads=True)}
    except (ImportError, TypeError):  # a torch without it
        return {}


class Capturer:
    def __init__(self, probe, writer):
        self.probe = probe
        self.ctl = ControlBlock(MappedView(writer._mm, L.CONTROL_OFFSET))
        self.kind = KIND_NSYS if os.environ.get("TUIMON_NSYS") == "1" else KIND_TORCH
        self.lock = threading.Lock()
        self.seq = self.ctl.read_request().seq
        self.pending = None  # a request waiting for the next step boundary
        self.window = None
        self.first = self.mode = self.length = 0
        self.started = 0.0
        self.exporting: threading.Thread | None = None
        self.exited = False  # the interpreter is exiting: no window opens any more
        self.pid = os.getpid()  # a forked child inherits the atexit hook: its exit closes nothing
        self._exit_hook = False
        self._set(L.STATE_IDLE, message="ready")

    def _set(self, state, first=0, last=0, message="", path="", seq=None):
        self.ctl.write_state(self.seq if seq is None else seq, state, first, last, self.kind,
                             time.monotonic_ns(), message, path)

    # -- from the control thread ------------------------------------------------------------------

    def poll(self) -> None:
        req = self.ctl.read_request()
        with self.lock:
            if self.exited:
                return
            if req.seq != self.seq and self.window is None and self.pending is None:
                self.seq = req.seq
                self._take(req)
            if self.window is not None and self.mode == L.CAPTURE_SECONDS and \
                    time.monotonic() - self.started >= self.length:
                self._close(self.probe.step_no - 1)

    def _take(self, req) -> None:
        if self.kind == KIND_NSYS:  # nsys start/stop come from the monitor (tuimon/capture/nsys_session.py)
            return self._set(L.STATE_FAILED, message="refused: this job's nsys session takes its windows from "
                                                     "the monitor (c in tuimon, or tuimon capture)")
        if req.mode == L.CAPTURE_STEPS and not 1 <= req.steps <= MAX_STEPS:
            return self._set(L.STATE_FAILED, message=f"refused: steps must be 1..{MAX_STEPS}")
        if req.mode == L.CAPTURE_SECONDS and not 0.1 <= req.seconds <= MAX_SECONDS:
            return self._set(L.STATE_FAILED, message=f"refused: seconds must be 0.1..{MAX_SECONDS:g}")
        if req.mode not in (L.CAPTURE_STEPS, L.CAPTURE_SECONDS):
            return self._set(L.STATE_FAILED, message="refused: unknown capture mode")
        try:
            folder = captures_dir()
            if free_bytes(folder) < capture_floor_bytes():
                return self._set(L.STATE_FAILED, message=f"refused: less than {capture_floor_bytes() >> 20} MiB free in {folder}")
        except OSError as e:
            return self._set(L.STATE_FAILED, message=f"refused: captures folder: {e.strerror}")
        self.mode = req.mode
        self.length = req.steps if req.mode == L.CAPTURE_STEPS else req.seconds
        if req.mode == L.CAPTURE_STEPS:
            self.pending = req
            self._set(L.STATE_ARMED, message=f"opens at the next step, for {req.steps} steps")
        else:
            self._open(self.probe.step_no)

    def _open(self, first_step: int) -> None:
        prog = safe_file_part(_program())
        base = os.path.join(captures_dir(), f"{prog}-{os.getpid()}-{self.seq}-{time.strftime('%Y%m%d-%H%M%S')}")
        try:
            off_thread = self.mode == L.CAPTURE_SECONDS  # opened here, on the control thread
            self.window = TorchWindow(base, all_threads=off_thread)
        except Exception as e:  # noqa: BLE001 - no torch, no CUDA, profiler busy: say so
            self.window = None
            return self._set(L.STATE_FAILED, message=f"could not start: {type(e).__name__}: {e}"[:250])
        self.first, self.started = first_step, time.monotonic()
        if not self._exit_hook:
            # Registered once torch is imported, so it runs before any atexit handler torch has
            # (atexit runs last-registered first); the probe's own (api._at_exit) runs later.
            atexit.register(self.at_exit)
            self._exit_hook = True
        if self.mode == L.CAPTURE_SECONDS:  # no step of it has completed yet
            self._set(L.STATE_CAPTURING, first_step, first_step - 1, message=f"capturing {self.length:g} s")
        else:
            self._set(L.STATE_CAPTURING, first_step, first_step, message="capturing")

    def _close(self, last_step: int, ended: str = "") -> None:
        """ended: why the window closes before its length (the job is exiting), said first in
        its state; the export then runs here, on the exiting thread."""
        window, self.window = self.window, None
        try:
            window.stop(at_exit=bool(ended))
        except Exception as e:  # noqa: BLE001
            return self._set(L.STATE_FAILED, self.first, last_step, message=f"{ended}stop failed: {e}"[:250])
        first, seq = self.first, self.seq
        self._set(L.STATE_WRITING, first, last_step, message=f"{ended}writing")

        def finish():
            try:
                path, msg = window.finish()
                self._set(L.STATE_DONE, first, last_step, message=f"{ended}{msg}"[:250], path=path, seq=seq)
            except Exception as e:  # noqa: BLE001
                self._set(L.STATE_FAILED, first, last_step, message=f"{ended}export failed: {e}"[:250], seq=seq)

        if ended:
            return finish()
        self.exporting = threading.Thread(target=finish, name="tuimon-capture-export", daemon=True)
        self.exporting.start()

    # -- at interpreter exit ----------------------------------------------------------------------

    def at_exit(self) -> None:
        """Close a window still open (and write it), say so of one still armed, and wait for an
        export under way (a daemon thread: shutdown would cut it off mid-file). Idempotent."""
        if self.pid != os.getpid():
            return
        with self.lock:
            if self.exited:
                return
            self.exited = True
            done = self.probe.step_no - 1
            if self.pending is not None:
                self.pending = None
                self._set(L.STATE_FAILED, message=f"the job ended at step {done}, before the window opened")
            elif self.window is not None:
                asked = f"{self.length} steps" if self.mode == L.CAPTURE_STEPS else f"{self.length:g} s"
                self._close(done, ended=f"the job ended inside the window at step {done} (asked: {asked}); ")
        exporting = self.exporting
        if exporting is not None:
            exporting.join(EXPORT_AT_EXIT_S)

    # -- from the training thread, at each step boundary (cheap when nothing is asked) --------

    def on_step(self, completed: int) -> None:
        if self.pending is None and self.window is None:
            return
        with self.lock:
            if self.exited:
                return
            if self.pending is not None:
                self.pending = None
                self._open(completed + 1)
            elif self.window is not None and self.mode == L.CAPTURE_STEPS:
                self._set(L.STATE_CAPTURING, self.first, completed, message="capturing")
                if completed - self.first + 1 >= self.length:
                    self._close(completed)


def _program() -> str:
    """What this process runs (train.py, the module after -m, or the executable), for file names."""
    from ..channel import procinfo

    return program_name(procinfo.cmdline(os.getpid()) or ["job"])


MEMORY_EVERY_S = 0.5
EXPORT_AT_EXIT_S = 60.0  # the longest the job's exit waits for a trace being written


def control_thread(capturer: Capturer, writer, stop: threading.Event, present=None, period: float = 0.2) -> None:
    """Polls the control block, keeps the heartbeat, says what the loop is doing now (present:
    probe/present.py) and reads the GPU memory gauges, until the process ends."""
    memory_at = 0.0
    while not stop.wait(period):
        sampler = capturer.probe.sampler
        if sampler is not None:
            try:
                sampler.collect()
            except Exception as e:  # noqa: BLE001 - no more hot lines, said once
                print(f"tuimon: the line sampler stopped: {type(e).__name__}: {e}", file=sys.stderr)
                capturer.probe.sampler = None
        if present is not None:
            try:
                present.publish()
            except Exception as e:  # noqa: BLE001 - the step in progress goes unsaid, said once
                print(f"tuimon: the step in progress is not published: {type(e).__name__}: {e}", file=sys.stderr)
                present = None
        if memory_at is not None and time.monotonic() - memory_at >= MEMORY_EVERY_S:
            memory_at = time.monotonic()
            try:
                capturer.probe.sample_gauges()
            except Exception as e:  # noqa: BLE001 - no memory gauges then, said once
                print(f"tuimon: GPU memory gauges off: {type(e).__name__}: {e}", file=sys.stderr)
                memory_at = None
        try:
            capturer.poll()
            writer.heartbeat(time.monotonic_ns())
        except Exception as e:  # noqa: BLE001 - never into the training process
            try:  # tell the monitor, which shows the control block's state
                capturer._set(L.STATE_FAILED, message=f"capture control: {type(e).__name__}: {e}"[:250])
            except Exception:  # noqa: BLE001
                pass
