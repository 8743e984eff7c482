"""The present moment, written by the probe's control thread (every ~0.2 s, never on the loop's
thread): the step in progress, its innermost open phase and since when, and where the loop thread
is; every thread's stack when a monitor asks (a stall); and how the job ended.

Nothing here runs on the training loop's thread except at its very end (atexit), and nothing here
changes the job: the stacks are read with sys._current_frames() (the GIL taken once, as the
heartbeat already does), and the uncaught exception is read from sys.last_value, which the
interpreter sets itself before it runs the atexit handlers, so no excepthook is replaced."""

from __future__ import annotations

import faulthandler
import os
import re
import sys
import sysconfig
import threading
import traceback
from time import monotonic_ns as _now
from typing import TYPE_CHECKING, Any

from ..channel import layout as L
from ..channel import procinfo
from ..channel.control import ControlBlock, Now, write_stacks
from ..channel.fileview import MappedView
from .anatomy import PHASES, short_path

if TYPE_CHECKING:
    from ..channel.writer import SegmentWriter
    from .core import Probe
    from .sampler import LineNames

MAX_FRAMES = 48  # per thread in a stacks dump (the innermost ones)
END_FRAMES = 4  # of an uncaught exception's traceback, innermost first
MESSAGE_CHARS = 600  # of its message, its lines joined
_TUIMON = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# tuimon's own code, but not its bundled workloads: the demo's loop is the job's own code to the
# person watching it (else its every sample fell through to torch's innermost frame).
try:
    _TUIMON_PARTS = tuple(os.path.join(_TUIMON, name, "") if os.path.isdir(os.path.join(_TUIMON, name))
                          else os.path.join(_TUIMON, name) for name in sorted(os.listdir(_TUIMON))
                          if name != "workloads" and not name.startswith("__pycache__"))
except OSError:  # (not a folder: a zipped install) all of it then
    _TUIMON_PARTS = (os.path.join(_TUIMON, ""),)


def library_dirs() -> tuple[str, ...]:
    """Code that is not the job's own: the standard library, torch, tuimon (frames in these are
    where the loop waits, not where it is in its own code)."""
    paths = sysconfig.get_paths()
    dirs = {paths.get("stdlib"), paths.get("platstdlib"), *_TUIMON_PARTS}
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    if torch_file:
        dirs.add(os.path.dirname(torch_file))
    return tuple(d if d in _TUIMON_PARTS else os.path.join(d, "") for d in dirs if d)


# An installed package's file (transformers, lightning, accelerate, numpy ...): library code, named
# where the loop's time goes inside it, but not the job's own. Found by its folder's name, wherever
# the packages live: a virtual environment's, or under the standard library's own folder (pyenv,
# conda, python.org and Docker builds put site-packages inside lib/python3.X).
INSTALLED = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


def line_rules() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """How the hot lines (probe/sampler.py, channel/_sampler.c) tell a frame's code apart, the first
    that matches: (prefixes never named: tuimon's own code and torch's, where the loop only passes
    through; markers of an installed library's files, a line of which is named, with the job's own
    line that led there beside it; prefixes of the standard library, never named). A file none of
    them matches (nor `<frozen ...>`, never named) is the job's own."""
    paths = sysconfig.get_paths()
    skip = [*_TUIMON_PARTS]
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    if torch_file:
        skip.append(os.path.join(os.path.dirname(torch_file), ""))
    stdlib = {os.path.join(d, "") for d in (paths.get("stdlib"), paths.get("platstdlib")) if d}
    return tuple(skip), INSTALLED, tuple(sorted(stdlib))


def _frame_text(f: Any) -> str:
    return f"{short_path(f.f_code.co_filename)}:{f.f_lineno} in {f.f_code.co_name}"


def loop_position(frame: Any, lines: LineNames) -> tuple[str, str, str]:
    """(the loop's line, by the hot lines' rule: lines.where, the sampler's walk; its context: the
    job's own line that led there when the line is an installed library's; the innermost frame
    when it is not that line: a call the loop waits in. tuimon's own wrappers are not where it waits.)"""
    while frame is not None and frame.f_code.co_filename.startswith(_TUIMON_PARTS):
        frame = frame.f_back
    if frame is None:
        return "", "", ""
    code, line, ctx, ctx_line = lines.where(frame)
    named = lines.named(code)
    where = f"{short_path(code.co_filename)}:{line or 0} in {code.co_name}" if named else ""
    context = f"{short_path(ctx.co_filename)}:{ctx_line or 0}" if named and ctx is not None else ""
    waiting = "" if named and frame.f_code is code and frame.f_lineno == line else _frame_text(frame)
    del frame
    return where, context, waiting


def _thread_state(native_id: int | None) -> str:
    """The kernel's word for the thread, as py-spy dump says it: active (running), idle
    (sleeping), or waiting in I/O (disk sleep)."""
    state = procinfo.thread_state(os.getpid(), native_id) if native_id else None
    return {"R": "active", "S": "idle", "D": "waiting in I/O (disk sleep)", "T": "stopped",
            "t": "stopped by a tracer"}.get(state or "", state or "?")


_DUMP_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)")
_DUMP_FRAME = re.compile(r'^  File "(.*)", line (\d+|\?\?\?) in (.*)$')

Stacks = dict[int, list[tuple[str, str, int]]]  # thread ident -> (name, file, line) of its frames, innermost first


def stacks_at_once() -> Stacks | None:
    """Every thread's frames, read in one C call that holds the GIL from the first frame to the
    last (faulthandler.dump_traceback, into a memory file): one moment of every thread, none of
    them moved on while it was read. None where it cannot be done (no memfd_create)."""
    try:
        fd = os.memfd_create("tuimon-stacks", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return None
    try:
        faulthandler.dump_traceback(fd, all_threads=True)
        text = os.pread(fd, os.lseek(fd, 0, os.SEEK_CUR), 0).decode("utf-8", "replace")
    finally:
        os.close(fd)
    stacks: Stacks = {}
    frames: list[tuple[str, str, int]] | None = None
    for line in text.splitlines():
        if m := _DUMP_THREAD.match(line):
            frames = stacks.setdefault(int(m.group(1), 16), [])
        elif (m := _DUMP_FRAME.match(line)) and frames is not None and len(frames) < MAX_FRAMES:
            frames.append((m.group(3), m.group(1), int(m.group(2)) if m.group(2).isdigit() else 0))
    return stacks or None


def stacks_walked() -> Stacks:
    """Every thread's frames, walked from sys._current_frames() in Python: the threads run between
    two frames read (a switch of the GIL), so a stack may be torn."""
    # (name, file, line) of each frame, innermost first, and the frames let go: a frame object held
    # while its function returns keeps its locals alive (sampler.LineSampler._line_now)
    return {ident: [(f.f_code.co_name, f.f_code.co_filename, line) for f, line in traceback.walk_stack(top)][:MAX_FRAMES]
            for ident, top in sys._current_frames().items()}


def stack_dump(loop_ident: int | None) -> str:
    """Every Python thread's stack, innermost frame first (py-spy dump's layout); the loop's first.
    The frames are one moment (stacks_at_once: issue 43 item 25, `t` showed torn stacks read frame
    by frame while the loop moved on), or said to be read frame by frame where that cannot be."""
    at_once = stacks_at_once()
    stacks = at_once if at_once is not None else stacks_walked()
    threads = {t.ident: t for t in threading.enumerate()}
    argv = procinfo.cmdline(os.getpid()) or sys.argv
    how = "" if at_once is not None else " (stacks read frame by frame while the threads ran: one may be torn)"
    lines = [f"Process {os.getpid()}: {' '.join(argv)}", f"Python v{sys.version.split()[0]}{how}", ""]
    for ident in sorted(stacks, key=lambda i: (i != loop_ident, i)):
        t = threads.get(ident)
        native = getattr(t, "native_id", None)
        name = t.name if t is not None else "(a thread not started by threading)"
        loop = " [the training loop]" if ident == loop_ident else ""
        lines.append(f'Thread {native or ident} ({_thread_state(native)}): "{name}"{loop}')
        for name, filename, line in stacks[ident]:
            lines.append(f"    {name} ({short_path(filename)}:{line})")
        lines.append("")
    return "\n".join(lines)


PROBE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep  # (its wrappers sit between the job and torch)


def exception_text(exc: BaseException, library: tuple[str, ...] = ()) -> str:
    """'Type: message', then where it came from: the innermost frame in the job's own code first, the
    frame it called next, then the innermost frames of its traceback, a line each."""
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    words = [w.strip() for w in str(exc).splitlines()]
    message = " · ".join(w for w in words if w.strip("=-_*#~ ")) [:MESSAGE_CHARS]  # (banners out: torchrun's)
    lines = [f"{name}: {message}" if message else name]
    frames = list(reversed(traceback.extract_tb(exc.__traceback__)))
    k = next((k for k, fs in enumerate(frames) if not fs.filename.startswith(library) and not fs.filename.startswith("<")),
             None)
    # the job's own line, what it called (a DataLoader's __next__: the monitor names a worker's death from it;
    # past the probe's own wrapper around it), then the innermost frames
    first = [] if k is None else [frames[k]]
    called = k - 1 if k is not None else -1
    while called > 0 and frames[called].filename.startswith(PROBE_DIR):
        called -= 1
    first += [frames[called]] if called >= 0 else []
    for fs in first + [fs for fs in frames[:END_FRAMES] if all(fs is not f for f in first)]:
        lines.append(f"  at {short_path(fs.filename)}:{fs.lineno} in {fs.name}")
    return "\n".join(lines)


class Present:
    """Owned by the control thread. publish() writes the step in progress and answers a stacks
    request; ended() records how the job ended (at interpreter exit)."""

    def __init__(self, probe: Probe, writer: SegmentWriter, lines: LineNames) -> None:
        self.probe = probe
        self.ctl = ControlBlock(MappedView(writer._mm, L.CONTROL_OFFSET))
        self.stacks = MappedView(writer._mm, L.STACKS_OFFSET)
        self.phase_ids = [probe.intern(name) for name in PHASES]
        self._library: tuple[str, ...] | None = None
        self._torch_seen = False
        self.lines = lines  # (its own LineNames: the sampler's thread walks with the sampler's; sampler.py imports this module)
        self.answered = 0

    def _library_dirs(self) -> tuple[str, ...]:
        torch_now = "torch" in sys.modules
        if self._library is None or torch_now != self._torch_seen:
            self._library, self._torch_seen = library_dirs(), torch_now
        return self._library

    def publish(self) -> None:
        p = self.probe
        a = p.anatomy
        top = a.top
        where, context, waiting = loop_position(sys._current_frames().get(a.loop), self.lines)
        self.ctl.write_now(Now(updated_ns=_now(), step=p.step_no, source=L.STEP_SOURCES[p.source],
                               phase_id=self.phase_ids[top] if 0 <= top < len(self.phase_ids) else 0,
                               collective_id=p.comm.last_call if p.comm is not None else 0,
                               phase_since_ns=a.since, step_t0_ns=p.step_t0, moved_ns=a.t,
                               longest_ns=p.longest_ns, where=where, context=context,
                               waiting_in=waiting))
        asked = self.ctl.stacks_request()
        if asked and asked != self.answered:
            self.answered = asked
            write_stacks(self.stacks, asked, _now(), stack_dump(a.loop))

    def ended(self) -> None:
        """At interpreter exit: an uncaught exception (the interpreter keeps it in sys.last_value
        before the atexit handlers run), else a clean end (the script returned or sys.exit())."""
        if self.ctl.read_end().kind != L.END_NONE:
            return
        exc = getattr(sys, "last_value", None)
        if isinstance(exc, BaseException):
            self.ctl.write_end(L.END_EXCEPTION, _now(), exception_text(exc, self._library_dirs()))
        else:
            self.ctl.write_end(L.END_CLEAN, _now(), "")
