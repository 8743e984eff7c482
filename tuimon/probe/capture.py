"""Capture windows inside the training process, asked for through the control block.

A window opens at the next step boundary and closes after N steps, or runs T seconds (loops
without steps): a torch.profiler window (TorchWindow: what of it runs where, and why), or, asked
for by kind, the caching allocator's history (MemoryWindow). (Under `tuimon run --nsys` the job runs in an nsys session whose windows the monitor
starts and stops itself: profiler requests that reach the probe are refused; memory windows are
the probe's in any job.) One window at a time; lengths are capped; a window is
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
import inspect
import json
import os
import pickle
import shutil
import threading
import time
from typing import TYPE_CHECKING, Any

from ..channel import layout as L
from ..channel.control import (
    KIND_MEMORY,
    KIND_NAMES,
    KIND_NSYS,
    KIND_TORCH,
    MAX_SECONDS,
    MAX_STEPS,
    ControlBlock,
)
from ..channel.fileview import MappedView
from ..channel.paths import capture_floor_bytes, captures_dir, free_bytes, program_name, safe_file_part
from ..channel.text import count
from . import graphs

if TYPE_CHECKING:
    from ..channel.writer import SegmentWriter
    from .core import Probe
    from .present import Present


class TorchWindow:
    """One Kineto (torch.profiler) window, driven through torch.autograd.profiler.profile rather
    than torch.profiler.profile: the latter imports torch._inductor on its first start (3-6 s on the
    CPU here, most of it holding the GIL, in a job that has not imported it yet: one whose optimizer
    has stepped has).

    Where the time goes (docs/reference.md): stopping (Kineto's flush and the building of its
    event lists), writing the trace and freeing the result are each one C++ call that holds the
    GIL throughout, a few us per event recorded: whichever thread runs them, the loop waits. So
    the most that can move off the loop moves: with a global profiler state (torch >= 2.7's
    profile_all_threads) the stop runs on tuimon's thread, with the CUDA sync it needs (the loop
    then never drains its queue for it), and the three calls run a few steps apart, so one step
    carries at most one of them. trace_only (where torch has it) skips the event tree tuimon never reads:
    a fifth to a half of the stop. Without a global state (older torch) the profiler records the thread that
    opened it alone (the control thread, for a window in seconds), and stops there."""

    def __init__(self, base: str):
        import torch
        from torch.autograd import profiler as autograd_profiler

        if autograd_profiler._is_profiler_enabled:  # one Kineto session per process
            raise RuntimeError("the job's own torch.profiler is running: try again once it has stopped")
        self.trace = base + ".pt.trace.json.gz"
        config, self.stop_anywhere = _experimental_config()
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()  # (a job on the CPU gets no CUDA context)
        self.device = torch.cuda.current_device() if cuda else None
        self.prof: Any = autograd_profiler.profile(use_cpu=True, use_device="cuda" if cuda else None, use_kineto=True,
                                              experimental_config=config)
        self.held_ms: dict[str, float] = {}  # stop / write / free: each a call that holds the GIL
        self.stopped_on = ""
        t = time.perf_counter()
        self.prof._prepare_trace()
        self.prof._start_trace()
        self.held_ms["start"] = (time.perf_counter() - t) * 1e3
        _add_distributed_info(torch, autograd_profiler)

    def stop(self, where: str) -> None:
        """On the thread that opened the window unless stop_anywhere; where: which, in words."""
        self.stopped_on = where
        if self.device is not None:
            import torch

            torch.cuda.set_device(self.device)  # (a thread's own: the sync below waits for the loop's GPU)
        t = time.perf_counter()
        self.prof.__exit__(None, None, None)  # CUDA sync, then Kineto's flush and event lists
        self.held_ms["stop"] = (time.perf_counter() - t) * 1e3

    def finish(self, pause: Any, at_exit: bool = False) -> tuple[str, str]:
        """Writes the trace (gzip) and frees the result, pause() between the calls that hold the
        GIL; returns (path, message). The summary is the monitor's job, read from the trace."""
        tmp = self.trace[: -len(".gz")]
        t = time.perf_counter()
        self.prof.export_chrome_trace(tmp)
        self.held_ms["write"] = (time.perf_counter() - t) * 1e3
        pause()
        t = time.perf_counter()
        self.prof = None  # (the result's destructor: every event recorded)
        self.held_ms["free"] = (time.perf_counter() - t) * 1e3
        with open(tmp, "rb") as src, gzip.open(self.trace, "wb", compresslevel=3) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)  # (zlib lets the GIL go)
        os.unlink(tmp)
        size = os.path.getsize(self.trace)
        h = self.held_ms
        return self.trace, (f"trace {_size(size)}; stopped in {h.get('stop', 0):.0f} ms on {self.stopped_on}, "
                            f"written in {h.get('write', 0):.0f} ms and freed in {h.get('free', 0):.0f} ms on "
                            + ("it too" if at_exit else "tuimon's, steps apart (each holds the GIL: the loop waits)"))


MEMORY_MAX_ENTRIES = 100_000  # allocator events a memory window keeps (a ring: the newest)


class MemoryWindow:
    """The caching allocator's history over one window: torch.cuda.memory._record_memory_history
    at open, a snapshot (torch.cuda.memory._snapshot, what _dump_snapshot pickles) at close, then
    recording off; written as the pickle PyTorch's memory viewer opens (pytorch.org/memory_viz,
    torch.cuda._memory_viz). Recorded: every alloc and free, each allocation with its Python stack
    (context="alloc": the stacks of frees are not kept; stacks="python": no C++ unwinding, whose
    symbolization at snapshot time takes seconds), at most MEMORY_MAX_ENTRIES events.

    Costs (tests/gpu/check_memory.py measures them on a GPU): each allocation while recording gathers its
    Python stack (torch's docs: ~2 us a trace); the snapshot and the pickling hold the GIL for a time
    that grows with the events kept, and run on tuimon's thread, so the loop waits for them where it
    needs the GIL. Recording is the process's, not a thread's: a job that records its own history
    has it turned off when the window closes (torch has no way to ask whether it is on)."""

    stop_anywhere = True  # (the history is the process's: stopped and written on tuimon's thread)

    def __init__(self, base: str):
        import torch

        if not torch.cuda.is_initialized():
            raise RuntimeError("the job has not used CUDA (yet): the allocator's history is a CUDA job's")
        self.memory = memory = torch.cuda.memory
        if not hasattr(memory, "_record_memory_history") or not hasattr(memory, "_snapshot"):
            raise RuntimeError("this torch has no allocator history (torch >= 2.1 has it)")
        self.path = base + ".memory.pickle"
        self.held_ms: dict[str, float] = {}
        self.stopped_on = ""
        self.snapshot = None
        self.events = 0
        kw: dict[str, Any] = dict(enabled="all", context="alloc", stacks="python", max_entries=MEMORY_MAX_ENTRIES)
        if "clear_history" in inspect.signature(memory._record_memory_history_impl
                                                if hasattr(memory, "_record_memory_history_impl")
                                                else memory._record_memory_history).parameters:
            kw["clear_history"] = True  # (a second window holds its own events only)
        t = time.perf_counter()
        memory._record_memory_history(**kw)
        self.held_ms["start"] = (time.perf_counter() - t) * 1e3

    def stop(self, where: str) -> None:
        """The snapshot, then recording off (torch's documented order)."""
        self.stopped_on = where
        t = time.perf_counter()
        try:
            self.snapshot = self.memory._snapshot()
        finally:
            self.memory._record_memory_history(enabled=None)
        self.held_ms["stop"] = (time.perf_counter() - t) * 1e3
        traces = self.snapshot.get("device_traces") if isinstance(self.snapshot, dict) else None
        self.events = sum(len(d) for d in traces if isinstance(d, list)) if isinstance(traces, list) else 0

    def finish(self, pause: Any, at_exit: bool = False) -> tuple[str, str]:
        """Pickles the snapshot (a file written then renamed: a reader never sees half of one),
        pause() before freeing it; returns (path, message)."""
        tmp = self.path + ".part"
        t = time.perf_counter()
        try:
            with open(tmp, "wb") as f:
                pickle.dump(self.snapshot, f, protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException:
            self.snapshot = None
            _unlink(tmp)
            raise
        self.held_ms["write"] = (time.perf_counter() - t) * 1e3
        pause()
        t = time.perf_counter()
        self.snapshot = None
        self.held_ms["free"] = (time.perf_counter() - t) * 1e3
        os.replace(tmp, self.path)
        h = self.held_ms
        full = " (the oldest overwritten)" if self.events >= MEMORY_MAX_ENTRIES else ""
        return self.path, (f"memory snapshot {_size(os.path.getsize(self.path))}, {self.events:,} allocator events"
                           f"{full}; recording on in {h.get('start', 0):.0f} ms; snapshot taken in "
                           f"{h.get('stop', 0):.0f} ms on {self.stopped_on}, written in {h.get('write', 0):.0f} ms")


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.0f} KiB"


def _experimental_config() -> Any:
    """(the config, whether the profiler state is global): trace_only and profile_all_threads
    where this torch has them."""
    try:
        from torch._C._profiler import _ExperimentalConfig
    except ImportError:
        return None, False
    tries: tuple[tuple[dict[str, Any], bool], ...] = (({"trace_only": True, "profile_all_threads": True}, True),
                                                      ({"profile_all_threads": True}, True), ({}, False))
    for kw, global_state in tries:
        try:
            return _ExperimentalConfig(**kw), global_state
        except TypeError:  # a torch without it
            continue
    return None, False


def _add_distributed_info(torch: Any, autograd_profiler: Any) -> None:
    """The rank in the trace's metadata, as torch.profiler writes it (for multi-rank tools)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            info = {"backend": dist.get_backend(), "rank": dist.get_rank(), "world_size": dist.get_world_size()}
            torch.autograd._add_metadata_json("distributedInfo", json.dumps(info))
    except Exception:  # noqa: BLE001 - metadata only
        pass


GAP_MIN_S, GAP_MAX_S = 0.05, 1.0  # between the calls that hold the GIL after a window


class Capturer:
    def __init__(self, probe: Probe, writer: SegmentWriter) -> None:
        self.probe = probe
        self.ctl = ControlBlock(MappedView(writer._mm, L.CONTROL_OFFSET))
        self.kind = KIND_NSYS if os.environ.get("TUIMON_NSYS") == "1" else KIND_TORCH  # the probe's own kind
        self.window_kind = self.kind  # the kind of the window asked for last (its states say it)
        self.lock = threading.Lock()
        self.seq = self.ctl.read_request().seq
        self.pending = None  # a request waiting for the next step boundary
        self.window: MemoryWindow | TorchWindow | None = None
        self.first = self.mode = 0
        self.length: float = 0  # steps (CAPTURE_STEPS) or seconds
        self.started = 0.0
        self.step_ns: list[int] = []  # the window's steps (their durations), for the gaps after it
        self.boundary_ns = 0
        self.finishing = False  # the last window is being stopped or written: the next waits
        self.exporting: threading.Thread | None = None
        self.exited = False  # the interpreter is exiting: no window opens any more
        self.pid = os.getpid()  # a forked child inherits the atexit hook: its exit closes nothing
        self._exit_hook = False
        self._set(L.STATE_IDLE, message="ready")

    def _set(self, state: int, first: int = 0, last: int = 0, message: str = "", path: str = "", seq: int | None = None
             ) -> None:
        self.ctl.write_state(self.seq if seq is None else seq, state, first, last, self.window_kind,
                             time.monotonic_ns(), message, path)

    # -- from the control thread ------------------------------------------------------------------

    def poll(self) -> None:
        if graphs.open_captures:
            return  # (no window opened or closed inside a CUDA-graph capture: asked again next poll)
        req = self.ctl.read_request()
        with self.lock:
            if self.exited:
                return
            if req.seq != self.seq and self.window is None and self.pending is None and not self.finishing:
                ops = self.probe.ops
                if ops is not None and ops.mode is not None:
                    return  # (a step whose ops are counted: the window waits for its end, ops.profiled says why)
                self.seq = req.seq
                self._take(req)
            if self.window is not None and self.mode == L.CAPTURE_SECONDS and \
                    time.monotonic() - self.started >= self.length:
                self._close(self.probe.step_no - 1, on_loop=False)

    def _take(self, req: Any) -> None:
        mode = req.base_mode
        if req.kind not in (0, KIND_MEMORY):
            self.window_kind = self.kind
            return self._set(L.STATE_FAILED, message=f"refused: unknown kind of window ({req.kind})")
        self.window_kind = KIND_MEMORY if req.kind == KIND_MEMORY else self.kind
        if self.window_kind == KIND_NSYS:  # nsys start/stop come from the monitor (tuimon/capture/nsys_session.py)
            return self._set(L.STATE_FAILED, message="refused: this job's nsys session takes its windows from "
                                                     "the monitor (c in tuimon, or tuimon capture)")
        if mode == L.CAPTURE_STEPS and not 1 <= req.steps <= MAX_STEPS:
            return self._set(L.STATE_FAILED, message=f"refused: steps must be 1..{MAX_STEPS}")
        if mode == L.CAPTURE_SECONDS and not 0.1 <= req.seconds <= MAX_SECONDS:
            return self._set(L.STATE_FAILED, message=f"refused: seconds must be 0.1..{MAX_SECONDS:g}")
        if mode not in (L.CAPTURE_STEPS, L.CAPTURE_SECONDS):
            return self._set(L.STATE_FAILED, message="refused: unknown capture mode")
        try:
            folder = captures_dir()
            if free_bytes(folder) < capture_floor_bytes():
                return self._set(L.STATE_FAILED, message=f"refused: less than {capture_floor_bytes() >> 20} MiB free in {folder}")
        except OSError as e:
            return self._set(L.STATE_FAILED, message=f"refused: captures folder: {e.strerror}")
        self.mode = mode
        self.length = req.steps if mode == L.CAPTURE_STEPS else req.seconds
        if mode == L.CAPTURE_STEPS:
            self.pending = req
            self._set(L.STATE_ARMED, message=f"opens at the next step, for {count(req.steps, 'step')}")
        else:
            self._open(self.probe.step_no)

    def _open(self, first_step: int) -> None:
        prog = safe_file_part(_program())
        base = os.path.join(captures_dir(), f"{prog}-{os.getpid()}-{self.seq}-{time.strftime('%Y%m%d-%H%M%S')}")
        try:
            self.window = MemoryWindow(base) if self.window_kind == KIND_MEMORY else TorchWindow(base)
        except Exception as e:  # noqa: BLE001 - no torch, no CUDA, profiler busy: say so
            self.window = None
            what = KIND_NAMES.get(self.window_kind, "capture")
            return self._set(L.STATE_FAILED, message=f"could not start the {what} window: {type(e).__name__}: {e}"[:250])
        self.first, self.started = first_step, time.monotonic()
        if not self._exit_hook:
            # Registered once torch is imported, so it runs before any atexit handler torch has
            # (atexit runs last-registered first); the probe's own (api._at_exit) runs later.
            atexit.register(self.at_exit)
            self._exit_hook = True
        self.step_ns, self.boundary_ns = [], 0
        if self.mode == L.CAPTURE_SECONDS:  # no step of it has completed yet
            self._set(L.STATE_CAPTURING, first_step, first_step - 1, message=f"capturing {self.length:g} s")
        else:
            self._set(L.STATE_CAPTURING, first_step, first_step, message="capturing")

    def _close(self, last_step: int, on_loop: bool, ended: str = "") -> None:
        """The window ends after last_step: stopped here, or on a thread of its own where the
        profiler state is global; then written and freed there, steps apart (TorchWindow says why).
        ended: why the window closes before its length (the job is exiting), said first in its
        state; all of it then runs here, on the exiting thread, with no pauses."""
        window, self.window = self.window, None
        assert window is not None  # (every caller closes an open window)
        first, seq = self.first, self.seq
        gap = 0.0 if ended else self._gap_s()

        def pause() -> None:
            time.sleep(gap)

        def stop(where: str) -> bool:
            try:
                window.stop(where)
                return True
            except Exception as e:  # noqa: BLE001
                self._set(L.STATE_FAILED, first, last_step, message=f"{ended}stop failed: {e}"[:250], seq=seq)
                return False

        elsewhere = window.stop_anywhere and not ended
        if not elsewhere:
            where = "the exiting thread, at exit" if ended else "the training thread" if on_loop else "tuimon's control thread"
            if not stop(where):
                return
        self.finishing = True
        self._set(L.STATE_WRITING, first, last_step, message=ended + ("stopping" if elsewhere else "writing"))

        def finish() -> None:
            try:
                if elsewhere:
                    if not stop("tuimon's thread"):
                        return
                    self._set(L.STATE_WRITING, first, last_step, message="writing", seq=seq)
                pause()
                path, msg = window.finish(pause, at_exit=bool(ended))
                self._set(L.STATE_DONE, first, last_step, message=f"{ended}{msg}"[:250], path=path, seq=seq)
            except Exception as e:  # noqa: BLE001
                self._set(L.STATE_FAILED, first, last_step, message=f"{ended}export failed: {e}"[:250], seq=seq)
            finally:
                self.finishing = False

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
                asked = count(int(self.length), "step") if self.mode == L.CAPTURE_STEPS else f"{self.length:g} s"
                self._close(done, on_loop=False, ended=f"the job ended inside the window at step {done} (asked: {asked}); ")
        exporting = self.exporting
        if exporting is not None:
            exporting.join(EXPORT_AT_EXIT_S)

    def _gap_s(self) -> float:
        """How long the loop runs between two calls that hold the GIL: two of its steps."""
        steps = sorted(self.step_ns[-20:])
        typical = steps[len(steps) // 2] / 1e9 if steps else 0.0
        return min(GAP_MAX_S, max(GAP_MIN_S, 2 * typical))

    # -- from the training thread, at each step boundary (cheap when nothing is asked) --------

    def on_step(self, completed: int) -> None:
        if self.pending is None and self.window is None:
            return
        t = time.monotonic_ns()
        if self.boundary_ns:
            self.step_ns.append(t - self.boundary_ns)
        self.boundary_ns = t
        with self.lock:
            if self.exited:
                return
            if self.pending is not None:
                self.pending = None
                self._open(completed + 1)
            elif self.window is not None and self.mode == L.CAPTURE_STEPS:
                self._set(L.STATE_CAPTURING, self.first, completed, message="capturing")
                if completed - self.first + 1 >= self.length:
                    self._close(completed, on_loop=True)


def _program() -> str:
    """What this process runs (train.py, the module after -m, or the executable), for file names."""
    from ..channel import procinfo

    return program_name(procinfo.cmdline(os.getpid()) or ["job"])


MEMORY_EVERY_S = 0.5
EXPORT_AT_EXIT_S = 60.0  # the longest the job's exit waits for a trace being written


def control_thread(capturer: Capturer, writer: SegmentWriter, stop: threading.Event, present: Present | None = None, period: float = 0.2) -> None:
    """Polls the control block, keeps the heartbeat, says what the loop is doing now (present:
    probe/present.py) and reads the GPU memory gauges, until the process ends."""
    memory_at: float | None = 0.0  # (None: the memory gauges off)
    while not stop.wait(period):
        sampler = capturer.probe.sampler
        if sampler is not None:
            try:
                sampler.collect()
            except Exception as e:  # noqa: BLE001 - no more hot lines, said once
                capturer.probe.say(f"the line sampler stopped: {type(e).__name__}: {e}")
                capturer.probe.sampler = None
        if present is not None:
            try:
                present.publish()
            except Exception as e:  # noqa: BLE001 - the step in progress goes unsaid, said once
                capturer.probe.say(f"the step in progress is not published: {type(e).__name__}: {e}")
                present = None
        if memory_at is not None and time.monotonic() - memory_at >= MEMORY_EVERY_S:
            memory_at = time.monotonic()
            try:
                capturer.probe.sample_gauges()
            except Exception as e:  # noqa: BLE001 - no memory gauges then, said once
                capturer.probe.say(f"GPU memory gauges off: {type(e).__name__}: {e}")
                memory_at = None
        try:
            capturer.poll()
            writer.heartbeat(time.monotonic_ns())
        except Exception as e:  # noqa: BLE001 - never into the training process
            try:  # tell the monitor, which shows the control block's state
                capturer._set(L.STATE_FAILED, message=f"capture control: {type(e).__name__}: {e}"[:250])
            except Exception:  # noqa: BLE001
                pass
