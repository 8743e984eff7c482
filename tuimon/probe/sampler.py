"""Where the loop thread's time goes, line by line: a thread of the probe's own reads the loop
thread's Python stack HZ times a second (sys._current_frames()), and counts each sample at the
innermost line of the job's own code, under the phase open at that moment, and by what the thread
was doing there:

- python: running Python. The sampler needs the GIL to read a stack; when the loop thread holds it
  (it runs Python), the sampler waits for the interpreter's switch interval (5 ms) before it gets
  it. A sample whose wake-up came late by more than LATE_NS is the loop running Python (Scalene
  tells Python from native time by the same kind of delay, of a signal's delivery);
- native: the GIL was free and the thread is running on a CPU (a torch op on the CPU, a copy, a
  spin-wait on the GPU) (the kernel's state letter R, /proc/self/task/TID/stat);
- waiting: the thread sleeps (S or D: a sleep, a lock, I/O, a blocking wait), whatever the GIL did.
  (On a machine with more runnable threads than cores, the sampler can come late for a core rather
  than the GIL: a native call then reads as Python; a sleeping thread never does.)

A sample that waited for the GIL lands where the loop next let it go: a stretch of Python shorter
than the interpreter's switch interval (5 ms) counts at the next call that releases the GIL (a
torch op, a copy, a sleep) - usually the line that matters; a longer stretch counts where it runs.

Rate: HZ (50) by default: at 50 Hz a 10 s window holds 500 samples, so a line's share is known
within ~2 points (the binomial error at n = 500), a step of 20 ms gets one sample, and the loop
thread pays only when it runs Python, one GIL hand-off (~tens of us) per sample (py-spy samples at
100 Hz by default, Scalene at 100 Hz: 50 keeps the hand-offs to half). TUIMON_SAMPLE_HZ sets it (0:
off). Lines are counted per step and written to the ring as HOT records when the step changes or
every second. Nothing here runs on the loop's thread."""

from __future__ import annotations

import linecache
import os
import sys
import threading
from time import monotonic_ns as _now

from ..channel import layout as L
from ..channel import procinfo
from .anatomy import short_path
from .present import library_dirs

HZ = 50
LATE_NS = 1_000_000  # a wake-up this late waited for the GIL (the switch interval is 5 ms; an idle wake-up ~0.1 ms)
MAX_LINES = 512  # distinct lines named; later ones count as "(other lines)"
FLUSH_NS = 1_000_000_000
CODE_CHARS = 60


def rate() -> float:
    try:
        return max(0.0, min(1000.0, float(os.environ.get("TUIMON_SAMPLE_HZ", HZ))))
    except ValueError:
        return float(HZ)


class LoopSampler:
    def __init__(self, probe, hz: float = HZ):
        self.probe, self.period = probe, 1.0 / hz
        self.lines = LineNames(probe.intern)
        self._counts: dict[tuple[int, int, int], int] = {}  # (phase, name id, how) -> samples, this step
        self._step = 0
        self._flushed = _now()
        self.samples = 0
        self._loop_tid: int | None = None

    paused = False  # (benchmarks switch the probe off and on: api.switch)

    def run(self, stop: threading.Event) -> None:
        """Samples on a fixed grid of times: a sample that came late (the loop held the GIL) does
        not push the next one later, which would sample Python less often than native code. Slots
        missed altogether (the sampler starved of a core) are not counted: whatever the loop does
        when the sampler gets to run again says nothing about them."""
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
                print(f"tuimon: the line sampler stopped: {type(e).__name__}: {e}", file=sys.stderr)
                return

    def sample(self, pid: int, late_ns: int) -> None:
        p = self.probe
        a = p.anatomy
        frame = sys._current_frames().get(a.loop)
        if frame is None:
            return
        phase, step = a.top, p.step_no
        self._loop_tid = self._native_id(a.loop)
        state = procinfo.thread_state(pid, self._loop_tid)
        if state in ("S", "D"):  # asleep: blocked in a call (a thread holding the GIL runs, or waits for a core)
            how = L.HOW_WAITING
        else:  # on a CPU: Python when it held the GIL (the sampler came late), else a native call
            how = L.HOW_PYTHON if late_ns > LATE_NS else L.HOW_NATIVE
        nid = self._line(frame)
        if step != self._step:
            self.flush()
            self._step = step
        key = (phase, nid, how)
        self._counts[key] = self._counts.get(key, 0) + 1
        self.samples += 1
        if _now() - self._flushed >= FLUSH_NS:
            self.flush()

    def flush(self) -> None:
        t, emit, tid = _now(), self.probe.emit, self._loop_tid or 0  # (the loop's samples: its thread id)
        for (phase, nid, how), n in self._counts.items():
            emit(L.HOT, phase, nid, tid, self._step, how, t, float(n))
        self._counts = {}
        self._flushed = t

    def _native_id(self, ident: int) -> int | None:
        t = threading._active.get(ident)  # (no lock: a read of a dict the interpreter keeps)
        return getattr(t, "native_id", None)

    def _line(self, frame) -> int:
        return self.lines.id_of(frame)


class LineNames:
    """The innermost frame of the job's own code (not the standard library, torch or tuimon),
    named "train.py:41 in main `x = batch.to(device)`" and interned, MAX_LINES at most."""

    def __init__(self, intern):
        self._intern = intern
        self._names: dict[tuple, str] = {}  # (file, line) -> name
        self._ids: dict[str, int] = {}
        self._library: tuple[str, ...] = ()
        self._torch_seen = None

    def name_of(self, frame) -> str:
        torch_now = "torch" in sys.modules
        if torch_now != self._torch_seen:
            self._library, self._torch_seen = library_dirs(), torch_now
        f = frame
        while f is not None and (f.f_code.co_filename.startswith(self._library) or f.f_code.co_filename.startswith("<")):
            f = f.f_back
        if f is None:
            f = frame
        key = (f.f_code.co_filename, f.f_lineno)
        name = self._names.get(key)
        if name is None:
            if len(self._names) >= MAX_LINES:
                return "(other lines)"
            code = linecache.getline(key[0], key[1]).strip()
            code = code if len(code) <= CODE_CHARS else code[: CODE_CHARS - 1] + "…"
            name = self._names[key] = f"{short_path(key[0])}:{key[1]} in {f.f_code.co_name}" + (f" `{code}`" if code else "")
        return name

    def id_of(self, frame) -> int:
        name = self.name_of(frame)
        nid = self._ids.get(name)
        if nid is None:
            nid = self._ids[name] = self._intern(name)
        return nid
