"""Public probe API: tuimon.instrument(), tuimon.range(), tuimon.step(), tuimon.count()."""

from __future__ import annotations

import atexit
import functools
import os
import shlex
import socket
import sys
import threading
from dataclasses import dataclass
from typing import Any

from ..channel import layout as L
from ..channel import procinfo, ring
from ..channel.errors import ChannelError
from ..channel.meta import JobMeta
from ..channel.paths import captures_dir
from ..channel.writer import SegmentWriter
from . import hooks, sampler, state
from .capture import Capturer, control_thread
from .core import Probe
from .present import Present

_disabled_reason: str | None = None
_fork_hook_registered = False


@dataclass(frozen=True)
class ProbeStatus:
    enabled: bool
    path: str | None = None
    reason: str | None = None  # why it is disabled
    nvtx_forwarding: bool = False


def _meta(mid_run: bool = False) -> JobMeta:
    env = os.environ
    try:
        cwd: str | None = os.getcwd()
    except OSError:  # (the job's folder was removed)
        cwd = None
    try:
        start_args = tuple(shlex.split(env.get("TUIMON_NSYS_START_ARGS", "")))
    except ValueError:  # unbalanced quotes: (the monitor checked them before launching)
        start_args = ()
    return JobMeta(
        argv=tuple(procinfo.cmdline(os.getpid()) or sys.argv),
        cwd=cwd,
        host=socket.gethostname(),
        python=sys.version.split()[0],
        rank=_int(env.get("RANK")),
        local_rank=_int(env.get("LOCAL_RANK")),
        world_size=_int(env.get("WORLD_SIZE")),
        cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
        launched_by_tuimon=env.get("TUIMON_RUN") == "1",
        capture_kind="nsys" if env.get("TUIMON_NSYS") == "1" else "torch.profiler",
        nsys_session=env.get("TUIMON_NSYS_SESSION"),
        nsys_start_args=start_args,
        hot_path=ring.IMPLEMENTATION,
        job_log=env.get("TUIMON_JOB_LOG"),
        loaded_mid_run=mid_run,
    )


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _nvtx_domain(forward: bool | None) -> Any:
    """NVTX's default domain when ranges should be forwarded: only when a tool (nsys) has
    injected itself, since otherwise nobody sees them; TUIMON_NVTX=0/1 overrides."""
    setting = os.environ.get("TUIMON_NVTX")
    if forward is None and setting in ("0", "1"):
        forward = setting == "1"
    if forward is None:
        forward = bool(os.environ.get("NVTX_INJECTION64_PATH"))
    if not forward:
        return None
    try:
        import nvtx  # optional: only if present
    except Exception:  # noqa: BLE001 - an unimportable nvtx just means no forwarding
        return None
    return nvtx.get_domain(None)


def instrument(ring_records: int | None = None, nvtx_forward: bool | None = None, directory: str | None = None,
               mid_run: bool = False) -> ProbeStatus:
    """Open this process's channel and install the hooks. Idempotent; never raises: when the
    channel cannot be created the probe stays off and says why once on stderr (mid_run: loaded into
    a running job by `tuimon inject`, which reads the reason from the returned status instead;
    directory: where the channel goes, as the injecting monitor looks for it)."""
    global _disabled_reason, _fork_hook_registered
    if state.probe is not None:
        return status()
    size = ring_records or _int(os.environ.get("TUIMON_RING_RECORDS")) or L.DEFAULT_RING_RECORDS
    try:
        writer = SegmentWriter.create(_meta(mid_run), size, directory)
    except ChannelError as e:
        if _disabled_reason is None and not mid_run:
            print(f"tuimon: probe disabled: {e}", file=sys.stderr)
        _disabled_reason = str(e)
        return status()
    p = Probe(writer, _nvtx_domain(nvtx_forward))
    p.mid_run = mid_run
    state.probe = p
    forward = p._nvtx is not None
    ring.bind(writer.ring, writer.names, writer.intern, p.nvtx_push if forward else None,
              p.nvtx_pop if forward else None, p.count)
    _start_capture_control(p)
    _watch_exit(writer)
    atexit.register(_at_exit, p)
    if not _fork_hook_registered:
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _fork_hook_registered = True
    hooks.install(p)
    return status()


# Signals whose default action ends the process, watched (while left at it) so that the job's end
# says which one (_exitwatch.c); SIGKILL cannot be, SIGINT is Python's own (KeyboardInterrupt).
EXIT_SIGNALS = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGABRT", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGSYS",
                "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGXCPU", "SIGXFSZ")


def _watch_exit(writer: SegmentWriter) -> None:
    """The process's exit code and a fatal signal written into its channel as it ends, by C code
    that needs no interpreter (only with the C extension: without it they stay unknown)."""
    if ring.IMPLEMENTATION != "c":
        return
    import signal

    try:
        from ..channel import _fastring

        _fastring.watch_exit(writer.path, L.CONTROL_OFFSET, L.CTL_EXIT_AT,
                             [int(getattr(signal, n)) for n in EXIT_SIGNALS if hasattr(signal, n)])
    except Exception:  # noqa: BLE001 - the job's end said less precisely, the probe on
        pass


def _start_capture_control(p: Probe) -> None:
    try:
        captures_dir(create=False)  # a relative folder: where the job starts, whatever its cwd later
        p.capturer = Capturer(p, p.writer)
        p.present = Present(p, p.writer, sampler.LineNames(p.intern))
    except Exception as e:  # noqa: BLE001 - captures off, the rest of the probe on
        p.say(f"capture windows unavailable: {type(e).__name__}: {e}")
        return
    stop = threading.Event()
    p._control_stop = stop
    p._control_thread = threading.Thread(target=control_thread, args=(p.capturer, p.writer, stop, p.present),
                                         name="tuimon-control", daemon=True)
    p._control_thread.start()
    hz = sampler.rate()
    if hz > 0:
        p.sampler = sampler.LoopSampler(p, hz)
        p.sampler.start(stop)


def status() -> ProbeStatus:
    p = state.probe
    if p is None:
        return ProbeStatus(False, reason=_disabled_reason or "not instrumented")
    if not p.writer.enabled:
        return ProbeStatus(False, p.writer.path, p.writer.error)
    return ProbeStatus(True, p.writer.path, nvtx_forwarding=p._nvtx is not None)


def switch(p: Probe, on: bool) -> None:
    """The instrumented probe on, or off as in a process without tuimon (every torch wrapper and
    hook swapped back, ranges unbound): for benchmarks that alternate both in one process."""
    from . import torch_hooks

    if p.sampler is not None:
        p.sampler.pause(not on)
    if not on and p.ops is not None and p.ops.mode is not None:
        p.ops.abandon()  # (a counted step in progress: its mode must not stay on while the probe is off)
    if on:
        state.probe = p
        hooks.install(p)
        ring.bind(p.writer.ring, p.writer.names, p.writer.intern, None, None, p.count)
        torch_hooks.set_enabled(True)
    else:
        torch_hooks.set_enabled(False)
        state.probe = None
        ring.bind(None)


CONTROL_JOIN_S = 5.0  # the longest a job's exit waits for tuimon's control thread (a cycle takes milliseconds)


def _at_exit(p: Probe) -> None:
    if state.probe is p:
        if p.capturer is not None:  # (its own hook, registered when a window opened, ran first)
            p.capturer.at_exit()
        stop = getattr(p, "_control_stop", None)
        if stop is not None:
            stop.set()
        # Joined before the interpreter finalizes: a daemon thread inside a torch call (the allocator's
        # gauges) that takes the GIL back after that is ended by pthread_exit, whose unwinding through
        # torch's C++ frames calls std::terminate: the job would die of SIGABRT at its exit.
        control = getattr(p, "_control_thread", None)
        if control is not None and control is not threading.current_thread():
            control.join(CONTROL_JOIN_S)
        if p.sampler is not None:
            p.sampler.stop(CONTROL_JOIN_S)
        # (the last step of a loop stepped by its model calls; the allocator's last gauges; the step in progress as
        # the loop left it, not as the control thread last said it; how it ended)
        for last_word in (p.finish, p.sample_memory, getattr(p.present, "publish", None),
                          getattr(p.present, "ended", None)):
            try:
                if last_word is not None:
                    last_word()
            except Exception:  # noqa: BLE001 - the job is ending: nothing of tuimon's may stop it
                pass
        p.writer.mark_closed()


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker) shares the parent's mapping: it must never write
    into the parent's ring. The probe goes quiet in the child."""
    global _disabled_reason
    p = state.probe
    if p is not None and p.ops is not None and p.ops.mode is not None:
        p.ops.abandon()  # (a worker forked in a counted step would run every op through it)
    if p is not None:
        p.writer.detach()
        _disabled_reason = "forked child of an instrumented process"
    state.probe = None
    ring.bind(None)
    ring.set_depth(0)


def step() -> None:
    """Mark the end of a training step (optional: optimizer steps are counted by themselves)."""
    p = state.probe
    if p is not None:
        p.step(explicit=True)


# tuimon.count(name, n=1): add n to a counter (samples, tokens) so the monitor can show throughput.
# channel.ring's (C where built: one call where a loop calls it, often right after its sync), bound
# with the probe's Probe.count for what it does not take itself (a tensor, a name that is not a str).
count = ring.count


class range(ring.Range):  # noqa: A001 - mirrors nvtx.annotate / torch.cuda.nvtx.range
    """A named range on the current thread, as a context manager or a decorator:

        with tuimon.range("forward"): ...
        @tuimon.range("load")
        def load(): ...

    Enter and exit are channel.ring.Range's (C when built): the record is written on exit."""

    __slots__ = ()

    def __call__(self, fn: Any) -> Any:
        name = self.name

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with range(name):
                return fn(*args, **kwargs)

        return wrapper
