"""Capture windows inside the training process, asked for through the control block.

A window opens at the next step boundary and closes after N steps, or runs T seconds (loops
without steps): a torch.profiler window whose trace is exported on a background thread, off the
training step. (Under `tuimon run --nsys` the job runs in an nsys session whose windows the monitor
starts and stops itself: requests that reach the probe are refused.) One window at a time; lengths are capped; a window is
refused when the captures folder has less free space than the floor.
"""

from __future__ import annotations

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

    def stop(self) -> None:
        t = time.perf_counter()
        self.prof.stop()  # on the training thread: torch needs it where it started
        self.stop_ms = (time.perf_counter() - t) * 1e3

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
        where = "on the training step" if not self.off_thread else "off the loop"
        return self.trace, (f"trace {_size(size)}; stopped in {self.stop_ms:.0f} ms {where}, "
                            f"exported in {export_ms:.0f} ms off it")


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
        self._set(L.STATE_IDLE, message="ready")

    def _set(self, state, first=0, last=0, message="", path="", seq=None):
        self.ctl.write_state(self.seq if seq is None else seq, state, first, last, self.kind,
                             time.monotonic_ns(), message, path)

    # -- from the control thread ------------------------------------------------------------------

    def poll(self) -> None:
        req = self.ctl.read_request()
        with self.lock:
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
        if self.mode == L.CAPTURE_SECONDS:  # no step of it has completed yet
            self._set(L.STATE_CAPTURING, first_step, first_step - 1, message=f"capturing {self.length:g} s")
        else:
            self._set(L.STATE_CAPTURING, first_step, first_step, message="capturing")

    def _close(self, last_step: int) -> None:
        window, self.window = self.window, None
        try:
            window.stop()
        except Exception as e:  # noqa: BLE001
            return self._set(L.STATE_FAILED, self.first, last_step, message=f"stop failed: {e}"[:250])
        first, seq = self.first, self.seq
        self._set(L.STATE_WRITING, first, last_step, message="writing")

        def finish():
            try:
                path, msg = window.finish()
                self._set(L.STATE_DONE, first, last_step, message=msg, path=path, seq=seq)
            except Exception as e:  # noqa: BLE001
                self._set(L.STATE_FAILED, first, last_step, message=f"export failed: {e}"[:250], seq=seq)

        threading.Thread(target=finish, name="tuimon-capture-export", daemon=True).start()

    # -- from the training thread, at each step boundary (cheap when nothing is asked) --------

    def on_step(self, completed: int) -> None:
        if self.pending is None and self.window is None:
            return
        with self.lock:
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


def control_thread(capturer: Capturer, writer, stop: threading.Event, present=None, period: float = 0.2) -> None:
    """Polls the control block, keeps the heartbeat, says what the loop is doing now (present:
    probe/present.py) and reads the GPU memory gauges, until the process ends."""
    memory_at = 0.0
    while not stop.wait(period):
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
