"""Where the loop thread's time goes, line by line: HZ times a second a sample of the loop thread's
Python stack, counted at its innermost line that is not tuimon's, torch's or the standard library's
(the job's own, or an installed library's with the job's own line that led there: LineNames), under
the phase open at that moment, and by how the thread was there:

- python: running Python;
- native: inside a native call, on a CPU (a torch op on the CPU, a copy, a spin-wait on the GPU);
- waiting: inside a native call, asleep (a sleep, a lock, I/O, a blocking wait on the GPU).

When the loop is the main thread (the usual case), a native thread of the probe's (channel/_sampler.c),
which never takes the GIL, asks the interpreter each period for a pending call. Running Python, the
main thread runs it within microseconds, at the line it is on: a python sample, exact, for the cost
of a callback of a few microseconds on the loop. When the call has not run a millisecond later, the
main thread is inside a native call and would run it only at its next check between bytecodes,
lines later; so that period is sampled from outside instead, by this module's thread, which reads
the main thread's stack with sys._current_frames(): the GIL is free while the call runs, so the
sample is at the line of the call, native or waiting by the thread's state in /proc (read by the
native thread, which says it in the byte it sends: read here, it held the GIL ~0.2 ms a sample), and
the loop pays nothing for it beyond the GIL this thread holds for a sample (~0.15 ms of CPU on a
2-core VM). (Scalene tells Python from native time by a similar delay, of a signal's.)

A wait whose place the probe knows (DataParallel's join of its replicas, probe/data_parallel.py) is
not sampled: the loop parks the native thread's requests for it and counts its periods itself, as
waiting samples at the line that called the model (park, unpark), so the replicas it waits for keep
the GIL.

Otherwise (the loop on another thread, or no C extension) this module's thread samples every period
from outside; it needs the GIL, so while the loop runs Python it waits for the interpreter's switch
interval (5 ms: a late wake-up is python) and the sample lands where the loop next let the GIL go.

Rate: HZ (50) by default: at 50 Hz a 10 s window holds 500 samples, so a line's share is known
within ~2 points (the binomial error at n = 500) and a step of 20 ms gets one sample (py-spy and
Scalene sample at 100 Hz by default). TUIMON_SAMPLE_HZ sets it (0: off). Samples are written to the
ring as HOT records (the control thread's every ~0.2 s, step: the step in progress then)."""

from __future__ import annotations

import linecache
import os
import sys
import threading
from collections.abc import Iterator
from time import monotonic_ns as _now
from typing import TYPE_CHECKING, Any

from ..channel import layout as L
from ..channel import procinfo, ring
from ..channel.lines import IMPORT, IMPORTING, LIBRARY, OWN, SKIPPED, pick
from .anatomy import short_path
from .present import line_rules

if TYPE_CHECKING:
    from .core import Probe

HZ = 50
LATE_NS = 1_000_000  # a sample asked for and not taken within this: the thread was inside a native call
MAX_LINES = 512  # distinct lines named; later ones count as "(other lines)"
FLUSH_NS = 1_000_000_000
CODE_CHARS = 60

native: Any = None  # (no type information: the C extension's module) channel/_sampler.c's functions, where the C extension is built and can wake the main thread
if ring.IMPLEMENTATION == "c":
    from ..channel import _fastring

    if getattr(_fastring, "SAMPLE_PROMPT", 0):
        native = _fastring


def rate() -> float:
    try:
        return max(0.0, min(1000.0, float(os.environ.get("TUIMON_SAMPLE_HZ", HZ))))
    except ValueError:
        return float(HZ)


class LoopSampler:
    paused = False  # (benchmarks switch the probe off and on: api.switch)

    def __init__(self, probe: Probe, hz: float = HZ) -> None:
        self.probe, self.hz, self.period = probe, hz, 1.0 / hz
        self.lines = LineNames(probe.intern)
        self._counts: dict[tuple[int, int, int], int] = {}  # (phase, name id, how) -> samples, not yet written
        self._thread: threading.Thread | None = None  # the loop's thread, as threading.enumerate() gave it
        self._step = 0
        self._flushed = _now()
        self._cut = False  # the counts before the job's first step were flushed apart (_cut_at_first_step)
        self._loop_tid: int | None = None
        self.samples = 0
        self.by_main = False  # the main thread samples itself (channel/_sampler.c)
        self._rules_sent: tuple = ()  # the rules channel/_sampler.c has (LineNames.library)
        self._stop: threading.Event | None = None
        self._outside = False  # the Python thread that samples from outside runs
        self._threads: list[threading.Thread] = []  # (joined at exit: api._at_exit)
        self._lock = threading.Lock()  # (the counts: the control thread and the sampling thread)
        self._parked_ns = 0  # time parked (park()) not yet counted as a whole period

    def start(self, stop: threading.Event) -> None:
        self._stop = stop
        main = threading.main_thread()
        if native is not None and self.probe.anatomy.loop == main.ident and threading.current_thread() is main:
            self._rules_sent = self.lines.library()
            fd = native.sample_start(self.hz, main.native_id, self._rules_sent, self.probe.anatomy)
            if fd >= 0:
                self.by_main = True
                self._spawn(self._outside_on_request, fd, stop)
        if not self.by_main:
            self._start_outside()

    def pause(self, on: bool) -> None:
        self.paused = on
        if self.by_main:
            native.sample_pause(on)

    def park(self) -> bool:
        """(the loop thread, before a wait whose place it knows: DataParallel's join of its replicas)
        No requests while it waits: each would go stale and wake this module's thread, which takes the
        GIL from the threads the loop waits for, HZ times a second, to find the loop where it is known
        to be. True: parked; unpark() then counts the periods."""
        if not self.by_main or self.paused:
            return False
        native.sample_pause(True)
        return True

    def unpark(self, t0: int, t1: int, frame: Any) -> None:
        """(the loop thread) The wait t0..t1 is over: its periods are waiting samples at the job's line
        that made it (frame: the waiting call's, let go here), under the phase open; requests resume
        (unless a pause was asked meanwhile)."""
        native.sample_pause(self.paused)
        self._parked_ns += t1 - t0
        n, self._parked_ns = divmod(self._parked_ns, max(1, int(self.period * 1e9)))
        if not n:
            return
        nid = self.lines.id_of(frame)
        del frame
        if not self._cut:
            self._cut_at_first_step()
        with self._lock:
            self._add(self.probe.anatomy.top, nid, L.HOW_WAITING, int(n))

    def stop(self, timeout: float) -> None:
        """(at exit, the stop event set) The sampling threads end and are waited for: one left in
        the interpreter's finalization could be ended by pthread_exit wherever it is, which aborts
        the job when that is inside C++ code (a torch object freed by a collection it ran)."""
        if native is not None:  # (also after the loop moved off the main thread: the native thread was paused)
            native.sample_stop()  # (the native thread joined; its pipe closed: the reader reads its end)
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout)

    def _spawn(self, target: Any, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, name="tuimon-sampler", daemon=True)
        self._threads.append(t)
        t.start()

    # -- the main thread: its own samples, and those it asks for from outside ----------------------

    def collect(self) -> None:
        """(the control thread, every ~0.2 s) The main thread's own samples to HOT records; a loop
        that moved off the main thread is sampled from outside from then on."""
        if not self.by_main:
            return
        p = self.probe
        if p.anatomy.loop != threading.main_thread().ident:
            native.sample_pause(True)
            self.by_main = False
            self._start_outside()
            return
        rules = self.lines.library()  # (compared with what the native side has, not with torch_seen: the
        if rules is not self._rules_sent:  # outside thread's naming may have updated them first)
            native.sample_library(rules)
            self._rules_sent = rules
        self._loop_tid = threading.main_thread().native_id
        self._step = p.step_no
        taken = [(asked, phase, self.lines.id_of_code(own, line, ctx, ctx_line), periods)
                 for asked, _, own, line, _, _, phase, periods, ctx, ctx_line in native.sample_take()]
        first = p.first_t0
        if first:  # the setup's samples (asked before the first step's start) are written stamped before it,
            early = [x for x in taken if x[0] < first]  # also when the outside thread made the cut first
            if early or not self._cut:
                with self._lock:
                    setup = self._take_setup() or {}
                    for _, phase, nid, periods in early:
                        self._add(phase, nid, L.HOW_PYTHON, periods, setup)
                self._write(setup, first - 1)
                taken = [x for x in taken if x[0] >= first]
        with self._lock:
            for _, phase, nid, periods in taken:
                self._add(phase, nid, L.HOW_PYTHON, periods)
        self.flush()

    def _cut_at_first_step(self) -> None:
        """Once the job's first step has started: what was counted so far is its setup's, written
        stamped just before that start (the monitor counts hot lines from it; a flush stamped later
        would put the setup's lines into the loop's)."""
        first = self.probe.first_t0
        if self._cut or not first:
            return
        with self._lock:  # (checked and taken at once: two threads cut; neither adds a sample between)
            setup = self._take_setup()
        if setup is not None:
            self._write(setup, first - 1)

    def _take_setup(self) -> dict | None:
        """The counts so far, once (under self._lock)."""
        if self._cut:
            return None
        self._cut = True
        counts, self._counts = self._counts, {}
        return counts

    def _outside_on_request(self, fd: int, stop: threading.Event) -> None:
        """The periods the main thread spent inside native calls, sampled from here (a byte a period)."""
        with open(fd, "rb", buffering=0, closefd=True) as pipe:
            self._read_requests(pipe, stop)

    def _read_requests(self, pipe: Any, stop: threading.Event) -> None:
        main = threading.main_thread()
        while not stop.is_set():
            try:
                asked = pipe.read(64)  # (blocks without the GIL; b"" once sample_stop closed the other end)
            except OSError:
                return
            if not asked:
                return
            if self.paused:
                continue
            try:
                nid = self._line_now(main.ident)
            except Exception:  # noqa: BLE001 - a frame caught mid-change: this sample is skipped; the
                continue  # thread goes on reading (the native side writes a byte a period to it)
            if nid is None:
                continue
            if not self._cut:
                self._cut_at_first_step()
            asleep, phase = asked.count(b"S"), self.probe.anatomy.top  # (a byte a period: 'S' asleep, 'R' on a CPU)
            with self._lock:
                if asleep:
                    self._add(phase, nid, L.HOW_WAITING, asleep)
                if len(asked) > asleep:
                    self._add(phase, nid, L.HOW_NATIVE, len(asked) - asleep)

    def _line_now(self, ident: int | None) -> int | None:
        """The id of the line thread `ident` is at. Its frame is let go here, before anything that
        lets the loop run (a blocking read, a /proc read): a frame object held while its function
        returns keeps that function's locals alive (a loss and its autograd graph, kept into the
        job's next CUDA-graph capture, break it)."""
        frame = sys._current_frames().get(ident) if ident is not None else None  # (None: a thread not started)
        return None if frame is None else self.lines.id_of(frame)

    def _add(self, phase: int, nid: int, how: int, n: int, counts: dict | None = None) -> None:
        counts = self._counts if counts is None else counts
        key = (phase, nid, how)
        counts[key] = counts.get(key, 0) + n
        self.samples += n

    # -- from outside (a thread of Python's) ------------------------------------------------------------

    def _start_outside(self) -> None:
        if not self._outside and self._stop is not None:
            self._outside = True
            self._spawn(self.run, self._stop)

    def run(self, stop: threading.Event) -> None:
        """Samples on a fixed grid of times: a sample that came late (the loop held the GIL) does
        not push the next one later, which would sample Python less often than native code. Slots
        missed altogether (the sampler starved of a core) are not counted."""
        pid, period = os.getpid(), int(self.period * 1e9)
        due = _now() + period
        while not stop.wait(max(0, due - _now()) / 1e9):
            late = _now() - due  # (the GIL taken back here: late when the loop held it)
            due += (1 + late // period) * period
            if self.paused:
                continue
            try:
                self.sample(pid, late)
            except Exception as e:  # noqa: BLE001 - the sampler stops, the job goes on; said once
                self.probe.say(f"the line sampler stopped: {type(e).__name__}: {e}")
                return

    def sample(self, pid: int, late_ns: int) -> None:
        p = self.probe
        a = p.anatomy
        nid = self._line_now(a.loop)
        if nid is None:
            return
        phase, step = a.top, p.step_no
        if not self._cut:
            self._cut_at_first_step()
        self._loop_tid = self._native_id(a.loop)
        state = procinfo.thread_state(pid, self._loop_tid)
        if state in ("S", "D"):  # asleep: blocked in a call (a thread holding the GIL runs, or waits for a core)
            how = L.HOW_WAITING
        else:  # on a CPU: Python when it held the GIL (the sampler came late), else a native call
            how = L.HOW_PYTHON if late_ns > LATE_NS else L.HOW_NATIVE
        if step != self._step:
            self.flush()
            self._step = step
        with self._lock:
            self._add(phase, nid, how, 1)
        if _now() - self._flushed >= FLUSH_NS:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            counts, self._counts = self._counts, {}
        self._write(counts, None)

    def _write(self, counts: dict, stamp: int | None) -> None:
        t = _now()
        emit, tid = self.probe.emit, self._loop_tid or 0  # (the loop's samples: its thread id)
        for (phase, nid, how), n in counts.items():
            emit(L.HOT, phase, nid, tid, self._step, how, t if stamp is None else stamp, float(n))
        self._flushed = t

    def _native_id(self, ident: int) -> int | None:
        """The thread's native id, from threading's public list (kept while that thread lives: the
        loop's thread is the same every sample; threading.enumerate takes a lock and copies)."""
        t = self._thread
        if t is None or t.ident != ident or not t.is_alive():
            t = self._thread = next((x for x in threading.enumerate() if x.ident == ident), None)
        return getattr(t, "native_id", None)


def _kinds(frame: Any, kind: Any, frames: list[Any]) -> Iterator[int]:
    """The kinds of frame's code and its callers', innermost first; each frame kept in frames."""
    while frame is not None:
        frames.append(frame)
        yield kind(frame.f_code.co_filename)
        frame = frame.f_back


class LineNames:
    """The loop's lines, named "train.py:41 in main `x = batch.to(device)`" and interned, MAX_LINES
    at most. The line named is the innermost frame that is not tuimon's, torch's or the standard
    library's: the job's own code, or an installed library's (transformers, lightning, accelerate: a
    loop a library drives spends its time there, not at the job's one line that called it). A
    library's line carries the job's own innermost line outside it as its context, after
    L.HOT_CONTEXT in the name: "transformers/trainer.py:2231 in training_step `...`\x1fhf_train.py:40".
    A library's line under an import (a module's top level run as it is imported) is not named: the
    line that imports it is, outside the import (the job's `import torch` spent its seconds in numpy's,
    sympy's and jinja's module bodies, hundreds of lines that took MAX_LINES before the loop began)."""

    def __init__(self, intern: Any) -> None:
        self._intern = intern
        self._names: dict[tuple, str] = {}  # (file, line, context file, context line) -> name
        self._ids: dict[str, int] = {}
        self._rules: tuple = ((), (), ())
        self._kinds: dict[str, int] = {}  # file -> OWN, LIBRARY or SKIPPED under self._rules
        self._torch_seen: bool | None = None

    def library(self) -> tuple:
        """presents.line_rules() (torch's folder once it is imported), as channel/_sampler.c takes them."""
        torch_now = "torch" in sys.modules
        if torch_now != self._torch_seen:
            self._rules, self._torch_seen = line_rules(), torch_now
            self._kinds = {}
        return self._rules

    def kind(self, file: str) -> int:
        k = self._kinds.get(file)
        if k is None:
            skip, installed, stdlib = self.library()
            k = (IMPORTING if file.startswith(IMPORT) else
                 SKIPPED if file.startswith("<") or file.startswith(skip) else
                 LIBRARY if any(m in file for m in installed) else
                 SKIPPED if file.startswith(stdlib) else OWN)
            if len(self._kinds) < 4 * MAX_LINES:
                self._kinds[file] = k
        return k

    def named(self, code: Any) -> bool:
        """Whether where()'s line is one a sample names (the job's own or a library's), not a frame
        it fell back to (a stack all torch's, tuimon's or the standard library's)."""
        return self.kind(code.co_filename) in (OWN, LIBRARY)

    def where(self, frame: Any) -> tuple:
        """(code, line, context code or None, context line) of the line a sample of `frame` is at, by
        channel/lines.py's rule (pick: channel/_sampler.c's walk, in Python; the samples taken from
        outside, and the now line: probe/present.py); the innermost frame where no frame is named."""
        self.library()
        frames: list[Any] = []
        hot_at, own_at = pick(_kinds(frame, self.kind, frames))
        hot = frames[hot_at] if hot_at is not None else frame
        own = frames[own_at] if own_at is not None else None
        where = (hot.f_code, hot.f_lineno, own.f_code if own is not None else None, own.f_lineno if own is not None else 0)
        del hot, own, frames, frame  # (before the source is read: _line_now says why)
        return where

    def name_of(self, frame: Any) -> str:
        """The line's name, without its context (the op counter's lines: probe/ops.py)."""
        code, line, _, _ = self.where(frame)
        return self._name(code, line)

    def _name(self, code: Any, line: int | None) -> str:
        """line: None where the frame is at no line (f_lineno is None in a frame being set up or torn
        down, as a sample from another thread can find it): named by its function alone."""
        key = (code.co_filename, line or 0)
        name = self._names.get(key)
        if name is None:
            if len(self._names) >= MAX_LINES:
                return "(other lines)"
            if not line:
                name = self._names[key] = f"{short_path(key[0])} in {code.co_name}"
                return name
            text = linecache.getline(key[0], line).strip().replace(L.HOT_CONTEXT, " ")
            text = text if len(text) <= CODE_CHARS else text[: CODE_CHARS - 1] + "…"
            name = self._names[key] = f"{short_path(key[0])}:{line} in {code.co_name}" + (f" `{text}`" if text else "")
        return name

    def _name_in(self, code: Any, line: int | None, ctx: Any, ctx_line: int | None) -> str:
        """The line's name, and its context's after L.HOT_CONTEXT (the line cut, never the context,
        where both are longer than a name may be)."""
        if ctx is None:
            return self._name(code, line)
        key = (code.co_filename, line or 0, ctx.co_filename, ctx_line or 0)
        name = self._names.get(key)
        if name is None:
            if len(self._names) >= MAX_LINES:
                return "(other lines)"
            where = self._name(code, line)
            context = L.HOT_CONTEXT + f"{short_path(ctx.co_filename)}:{ctx_line or 0}"
            room = L.MAX_NAME_BYTES - len(context.encode())
            if len(where.encode()) > room:
                where = where.encode()[: max(room - 3, 0)].decode(errors="ignore") + "…"
            name = self._names[key] = where + context
        return name

    def _id(self, name: str) -> int:
        nid = self._ids.get(name)
        if nid is None:
            nid = self._ids[name] = self._intern(name)
        return nid

    def id_of(self, frame: Any) -> int:
        return self._id(self._name_in(*self.where(frame)))

    def id_of_code(self, code: Any, line: int | None, ctx: Any = None, ctx_line: int | None = None) -> int:
        return self._id(self._name_in(code, line, ctx, ctx_line))
