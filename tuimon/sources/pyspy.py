"""The main thread of a Python process without the probe, sampled from outside with py-spy: the
lines it spends its time at, and how it was there (running Python, in a native call, blocked).

py-spy writes what it recorded only when it ends, so sampling goes in rounds: one `py-spy record
--format raw` of FIRST_ROUND_S seconds (the first lines soon), then ROUND_S each (a recorder's
start, ~13 ms of CPU, is paid less often); the lines shown are the last WINDOW_S seconds' rounds.
A round runs three recorders over the same seconds, which keep different samples:
  all     (--idle)  every sample of the thread: each line's share of its time
  active  (default) the samples where the OS says the thread runs (py-spy's idle test)
  gil     (--gil)   the samples where it holds the GIL: running Python
so per line: Python = gil / all, native = (active - gil) / all, blocked = (all - active) / all, the
split the probe's own sampler makes (probe/sampler.py).

--nonblocking: py-spy reads the job's memory while it runs (process_vm_readv) rather than stopping
every thread for each sample: the job pays nothing; now and then a stack read mid-change is an
error py-spy counts and leaves out. RATE_HZ 25: the first round's 2 s hold 50 samples of the
thread, past HOT_MIN_SAMPLES (20), so lines come within 5 s of attaching, and a 10 s window holds
~250 (a share within ~0.03); each recorder costs ~0.7% of a core at that rate
(benchmarks/attach_pyspy_cost.py measures both sides).

Everything here runs on the sampler's own thread; a recorder that outlives its round by GRACE_S is
killed, and stop() kills the ones running."""

from __future__ import annotations

import linecache
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..channel.lines import IMPORT, IMPORTING, LIBRARY, OWN, SKIPPED, pick
from ..channel.text import safe_text
from ..model import OUTSIDE_PHASE, HotLine, OutsideLines
from ..model.record import record

if TYPE_CHECKING:
    import psutil  # (imported where it is used: `attach` on a process without the probe)

RATE_HZ = 25
FIRST_ROUND_S, ROUND_S = 2, 4  # whole seconds: py-spy's --duration
WINDOW_S = 10  # the lines shown are the last rounds' within this span (the newest round at least)
GRACE_S = 10.0  # a recorder still running this long after its round is killed
RETRY_S = 10.0  # after py-spy failed (not Python yet, no permission), try again this much later
MAX_LINES = 30  # lines kept in a snapshot, the largest first
CODE_CHARS = 60
MAX_SOURCE_BYTES = 10 * 2**20  # the job's source files read for a line's code: regular files this large at most
MODES = {"all": ["--idle"], "active": [], "gil": ["--gil"]}
CAP_SYS_PTRACE = 19  # its bit in /proc/PID/status's CapEff

_THREAD = re.compile(r"^thread \((0x[0-9A-Fa-f]+|\d+)\)(?:: (.*))?$")
_FRAME = re.compile(r"^(.*?) \((.*):(\d+)\)$")
_SAMPLES = re.compile(r"Samples: (\d+) Errors: (\d+)")
_STDLIB = re.compile(r"/lib(?:64)?/python3\.\d+t?/(?!(?:site|dist)-packages/)")


def find_pyspy() -> str | None:
    """py-spy's executable: TUIMON_PYSPY, else on PATH, beside this Python, or where its wheel put
    it (`pip install --target DIR` puts it in DIR/bin, which no PATH names)."""
    given = os.environ.get("TUIMON_PYSPY")
    if given:
        return given if os.access(given, os.X_OK) else None
    import importlib.metadata  # (10 ms and the email package: only when py-spy is looked for)

    found = [shutil.which("py-spy"), os.path.join(os.path.dirname(sys.executable), "py-spy")]
    try:
        dist = importlib.metadata.distribution("py-spy")
        found += [str(f.locate()) for f in dist.files or [] if f.name == "py-spy"]
        found.append(str(dist.locate_file("bin/py-spy")))
    except importlib.metadata.PackageNotFoundError:
        pass
    return next((p for p in found if p and os.path.isfile(p) and os.access(p, os.X_OK)), None)


@dataclass
class _Round:
    counts: dict[str, Counter]  # mode -> (file, line, function) -> the main thread's samples
    threads: int
    thread: str | None
    errors: int
    seconds: float


@record(kw_only=False)
class _Frame:
    function: str
    file: str
    line: int


class OutsideSampler:
    """Samples pid's main thread with py-spy, round after round, on a thread of its own. latest()
    is the last window's lines, or why there are none; start() once, stop() to end it."""

    def __init__(self, pid: int, rate_hz: int = RATE_HZ, round_s: int = ROUND_S, first_round_s: int = FIRST_ROUND_S,
                 window_s: float = WINDOW_S, nonblocking: bool = True, exe: str | None = None):
        self.pid, self.rate_hz, self.nonblocking, self.exe = pid, rate_hz, nonblocking, exe
        self.round_s, self.first_round_s, self.window_s = round_s, first_round_s, window_s
        self._rounds: list[_Round] = []
        self._stop = threading.Event()
        self._running: list[subprocess.Popen] = []
        self._lock = threading.Lock()  # guards _running between this thread and stop()
        self._thread = threading.Thread(target=self._run, name="tuimon-pyspy", daemon=True)
        self._process = _process(pid)  # (the PID's process: one reusing the PID later is another)
        self._cwd = _cwd(self._process)
        self._names: dict[tuple[str, int, str], str] = {}
        self.tool = "py-spy"
        self._latest = OutsideLines(pid=pid, state="starting", rate_hz=float(rate_hz),
                                    why=f"py-spy reads the main thread {rate_hz} times a second; the first lines "
                                        f"come after {first_round_s} s")
        self.rounds_done = 0

    def latest(self) -> OutsideLines:
        return self._latest

    def start(self) -> OutsideSampler:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            for p in self._running:
                _kill(p)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # -- the sampler's thread -------------------------------------------------------------------------

    def _running_still(self) -> bool:
        """The process it was made for still runs (psutil's is_running(): the PID not reused)."""
        return self._process is not None and self._process.is_running()

    def _run(self) -> None:
        workdir = tempfile.mkdtemp(prefix="tuimon-pyspy-")
        try:
            exe = self.exe or find_pyspy()
            if exe is None:
                self._fail("py-spy is not installed here: it comes with tuimon on Linux x86_64 and aarch64 "
                           "(pip install py-spy), or TUIMON_PYSPY=/path/to/py-spy")
                return
            self.tool = _version(exe)
            while not self._stop.is_set():
                if not self._running_still():
                    self._publish("ended", f"PID {self.pid} has exited")
                    return
                why = self._round(exe, workdir)
                if self._stop.is_set():
                    return
                if why is not None:
                    if not self._running_still():
                        self._publish("ended", f"PID {self.pid} has exited")
                        return
                    self._fail(why)
                    self._stop.wait(RETRY_S)
        except Exception as e:  # noqa: BLE001 - the sampler stops with words, the monitor goes on
            self._fail(f"the outside sampler stopped: {type(e).__name__}: {e}")
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def _round(self, exe: str, workdir: str) -> str | None:
        """One round of every recorder; None, or why py-spy could not sample."""
        seconds = self.round_s if self.rounds_done else self.first_round_s
        procs: dict[str, tuple[subprocess.Popen, str, str]] = {}
        env = {**os.environ, "RUST_BACKTRACE": "0"}  # (its message, not a Rust backtrace)
        with self._lock:
            if self._stop.is_set():
                return None
            for mode, flags in MODES.items():
                out, log = os.path.join(workdir, f"{mode}.txt"), os.path.join(workdir, f"{mode}.log")
                for path in (out, log):
                    if os.path.exists(path):
                        os.unlink(path)
                cmd = [exe, "record", "--pid", str(self.pid), "--duration", str(seconds), "--rate",
                       str(self.rate_hz), "--format", "raw", "--output", out, "--threads", "--full-filenames",
                       *(["--nonblocking"] if self.nonblocking else []), *flags]
                with open(log, "wb") as logf:
                    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)  # (a Ctrl-C at the terminal is tuimon's to handle)
                procs[mode] = (p, out, log)
                self._running.append(p)
        deadline = time.monotonic() + seconds + GRACE_S
        try:
            while any(p.poll() is None for p, _, _ in procs.values()):
                if self._stop.wait(0.05):
                    return None
                if time.monotonic() > deadline:
                    return (f"py-spy did not end a {seconds} s recording within {seconds + GRACE_S:.0f} s "
                            "(killed; trying again)")
        finally:
            with self._lock:
                for p, _, _ in procs.values():
                    _kill(p)
                    self._running.remove(p)
        results = {}
        for mode, (p, out, log) in procs.items():
            text = _read(log, 4096)
            if p.returncode != 0 or not os.path.exists(out):
                if mode == "all":
                    return self._why_failed(text)
                continue  # (without it, no split of how the thread was)
            results[mode] = (_read(out, 64 * 2**20), text)
        self._add(results, seconds)
        return None

    def _add(self, results: dict[str, tuple[str, str]], seconds: float) -> None:
        counts: dict[str, Counter] = {}
        threads, thread, errors = 0, None, 0
        for mode, (raw, log) in results.items():
            n, name, main = self._parse(raw)
            counts[mode] = main
            if mode == "all":
                threads, thread = n, name
                m = _SAMPLES.search(log)
                errors = int(m.group(2)) if m else 0
        rounds = self._rounds + [_Round(counts, threads, thread, errors, seconds)]
        while len(rounds) > 1 and sum(r.seconds for r in rounds) > self.window_s:
            rounds.pop(0)
        self._rounds = rounds
        self.rounds_done += 1
        self._publish("sampling", "")

    def _parse(self, raw: str) -> tuple[int, str | None, Counter]:
        """(threads seen, the main thread's name, its samples by (file, line, function)) from py-spy's
        raw output: a line per stack, `thread (TID): NAME;outer (file:line);...;inner (file:line) COUNT`."""
        threads: set[str] = set()
        main_name: str | None = None
        main: Counter = Counter()
        for line in raw.splitlines():
            stack, _, count = line.rpartition(" ")
            if not count.isdigit():
                continue
            frames = stack.split(";")
            m = _THREAD.match(frames[0])
            if m is None:
                continue
            tid, name = m.group(1), m.group(2)
            threads.add(tid)
            is_main = tid == str(self.pid) or (tid.startswith("0x") and name == "MainThread")
            if not is_main:
                continue
            main_name = name
            parsed = [_Frame(f.group(1), f.group(2), int(f.group(3))) for s in frames[1:] if (f := _FRAME.match(s))]
            where, own = _line_frame(parsed)
            key = ((where.file, where.line, where.function, own.file if own else "", own.line if own else 0)
                   if where else ("", 0, "(no Python frame)", "", 0))
            main[key] += int(count)
        return len(threads), main_name, main

    def _publish(self, state: str, why: str) -> None:
        rounds = self._rounds
        total: Counter = Counter()
        for r in rounds:
            total.update(r.counts.get("all", Counter()))
        n = sum(total.values())
        split = [r for r in rounds if len(r.counts) == len(MODES)]  # (rounds every recorder finished)
        by: dict[str, Counter] = {mode: Counter() for mode in MODES}
        for r in split:
            for mode in MODES:
                by[mode].update(r.counts[mode])
        lines = []
        for key, k in total.most_common(MAX_LINES):
            python = native = waiting = 0.0
            every = by["all"][key]
            if every:
                gil = min(by["gil"][key], every)
                active = min(max(by["active"][key], gil), every)
                python, native, waiting = gil / every, (active - gil) / every, (every - active) / every
            context = f"{_short(key[3], self._cwd)}:{key[4]}" if key[3] else ""
            lines.append(HotLine(phase=OUTSIDE_PHASE, line=self._name(key[:3]), context=context, samples=k,
                                 share=round(k / n, 4),
                                 phase_share=round(k / n, 4), python=round(python, 3), native=round(native, 3),
                                 waiting=round(waiting, 3)))
        last = rounds[-1] if rounds else None
        self._latest = OutsideLines(pid=self.pid, state=state, why=why, tool=self.tool, rate_hz=float(self.rate_hz),
                                    seconds=float(sum(r.seconds for r in rounds)), samples=n,
                                    threads=last.threads if last else 0, thread=last.thread if last else None,
                                    errors=sum(r.errors for r in rounds), hot_lines=lines)

    def _fail(self, why: str) -> None:
        self._publish("failed", why)

    def _name(self, key: tuple[str, int, str]) -> str:
        """'train.py:41 in main · x = batch.to(device)', as the probe names a line."""
        name = self._names.get(key)
        if name is None:
            path, line, function = key
            if not path:
                return function
            code = _code(path, line)
            name = f"{_short(path, self._cwd)}:{line} in {function}" + (f" · {code}" if code else "")
            if len(self._names) < 4096:
                self._names[key] = name
        return name

    def _why_failed(self, text: str) -> str:
        """py-spy's failure in words: what stops it, and what would let it read the process."""
        low = text.lower()
        if "permission denied" in low or "operation not permitted" in low:
            return ptrace_denied(self.pid)
        if "python version" in low or "python interpreter" in low or "not a python" in low:
            return not_python(self.pid)
        last = next((s for s in reversed(text.strip().splitlines()) if s.strip()), "no message")
        return f"py-spy failed: {safe_text(last.strip(), 300)}"


def _line_frame(frames: list[_Frame]) -> tuple[_Frame | None, _Frame | None]:
    """(the frame whose line is named, its context's frame or None) by the probe's sampler's rule
    (channel/lines.py pick): the innermost frame in the job's own code or an installed library's,
    a library's with the job's own line that led there; else the innermost frame."""
    inward = frames[::-1]
    hot, own = pick(_kind(f.file) for f in inward)
    if hot is None:
        return (inward[0] if inward else None), None
    return inward[hot], (inward[own] if own is not None else None)


def _kind(path: str) -> int:
    """A frame's code, as channel/lines.py names the kinds (probe/sampler.py LineNames.kind, from here:
    the target's folders are told by their names, not by this interpreter's paths)."""
    if path.startswith(IMPORT):
        return IMPORTING
    if _library(path):
        return SKIPPED
    return LIBRARY if "/site-packages/" in path or "/dist-packages/" in path else OWN


def _library(path: str) -> bool:
    if path.startswith("<"):
        return True
    if re.search(r"/(?:site|dist)-packages/torch/", path):
        return True
    return _STDLIB.search(path) is not None


def _short(path: str, cwd: str | None) -> str:
    """A file, short: relative to the job's working directory, else from its package."""
    prefix = os.path.join(cwd, "") if cwd else None
    if prefix and path.startswith(prefix):
        return path[len(prefix):]
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return "/".join(path.split("/")[-2:])


def _code(path: str, line: int) -> str:
    """The line's code where its file is readable here (a regular file of a sane size: a name the job
    gave its code must never block this thread on a pipe)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return ""
    if not os.path.isfile(path) or st.st_size > MAX_SOURCE_BYTES:
        return ""
    code = linecache.getline(path, line).strip()
    return code if len(code) <= CODE_CHARS else code[: CODE_CHARS - 1] + "…"


def _process(pid: int) -> psutil.Process | None:
    import psutil

    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _cwd(p: psutil.Process | None) -> str | None:
    import psutil

    try:
        return p.cwd() if p is not None else None
    except psutil.Error:
        return None


def _cmdline(pid: int) -> list[str]:
    import psutil

    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


def _read(path: str, limit: int) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def _kill(p: subprocess.Popen) -> None:
    """The recorder and anything it started (its own process group)."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _version(exe: str) -> str:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "py-spy"
    return safe_text(out, 40) if out.startswith("py-spy") else "py-spy"


# -- words for what stops py-spy --------------------------------------------------------------------


def describe(pid: int) -> str:
    argv = _cmdline(pid)
    return f"PID {pid} ({safe_text(' '.join(argv), 80)})" if argv else f"PID {pid}"


def not_python(pid: int) -> str:
    """A process py-spy finds no Python in: say so, and name a Python descendant to attach to."""
    words = f"{describe(pid)} is not a Python process (py-spy finds no Python interpreter in it): no hot lines"
    import psutil

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        children = []
    for child in children:
        argv = _cmdline(child.pid)
        if argv and "python" in os.path.basename(argv[0]):
            return words + f"; its descendant {describe(child.pid)} is one: `tuimon attach {child.pid}`"
    return words


def ptrace_denied(pid: int) -> str:
    """Why this process may not read pid's memory, and what grants it (the kernel's ptrace access
    rules: the same user and a dumpable target, then Yama's ptrace_scope; or CAP_SYS_PTRACE)."""
    me, uids = os.geteuid(), _uids(pid)
    scope = _ptrace_scope()
    scope_words = f"kernel.yama.ptrace_scope is {scope}" if scope is not None else "no Yama ptrace_scope here"
    grants = (f"the same user with ptrace_scope 0 ({scope_words}), or CAP_SYS_PTRACE (a container: docker run "
              "--cap-add SYS_PTRACE; Kubernetes: securityContext.capabilities.add [SYS_PTRACE]), or root")
    lead = f"py-spy may not read {describe(pid)}'s memory (ptrace denied)"
    if uids and set(uids) != {me}:
        other = uids[1] if len(uids) > 1 else uids[0]
        why = (f"it runs as {_user(other)} (uid {other}) and tuimon as {_user(me)} (uid {me}): another user's "
               "process takes CAP_SYS_PTRACE or root")
    elif _not_dumpable(pid, uids):
        why = ("it is not dumpable (it called prctl(PR_SET_DUMPABLE, 0), or changed its user or group ID): only "
               "CAP_SYS_PTRACE or root may read it")
    elif scope == 1:
        why = (f"{scope_words}: only a process's ancestors may read it, and tuimon is not one of {pid}'s "
               "(`sudo sysctl kernel.yama.ptrace_scope=0` lets the same user)")
    elif scope == 2:
        why = f"{scope_words}: only CAP_SYS_PTRACE (root) may read another process"
    elif scope == 3:
        why = f"{scope_words}: no process may read another's memory until the next boot"
    elif not _has_cap_ptrace():
        why = ("the same user, dumpable, yet refused: a container without CAP_SYS_PTRACE, or a seccomp profile that "
               "blocks process_vm_readv and ptrace")
    else:
        why = "refused though tuimon has CAP_SYS_PTRACE: a security module (AppArmor, SELinux) or seccomp"
    return f"{lead}: {why}. What grants it: {grants}"


def _uids(pid: int) -> list[int]:
    """The process's real, effective and saved user IDs."""
    import psutil

    try:
        return list(psutil.Process(pid).uids())
    except psutil.Error:
        return []


def _not_dumpable(pid: int, uids: list[int]) -> bool:
    """A process that is not dumpable has the files in its /proc directory owned by root (proc(5)).
    Read by hand: psutil has no call for whether a process is dumpable."""
    try:
        owner = os.stat(f"/proc/{pid}/mem").st_uid
    except OSError:
        return False
    return owner == 0 and bool(uids) and uids[0] != 0


def _ptrace_scope() -> int | None:
    """Yama's ptrace_scope, from /proc/sys by hand: psutil does not read kernel settings."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _has_cap_ptrace() -> bool:
    """This process's effective capabilities (CapEff of /proc/self/status), by hand: psutil does not
    read capabilities."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_SYS_PTRACE & 1)
    except (OSError, ValueError):
        pass
    return False


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "a user with no name here"
