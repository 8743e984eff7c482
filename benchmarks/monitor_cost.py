"""tuimon beside nvitop on the same training job, in one run, as a user sees them: each in its own
pseudo-terminal (120x40 by default), the screen emulated (pyte).

    python benchmarks/monitor_cost.py [--seconds 60] [--starts 3] [--size 120x40] [--interval 1] \
        [--job "python -m tuimon.workloads.demo_train"] [--pid PID] [--only tuimon|nvitop] \
        [--program "NAME=COMMAND {pid}" ...]

1. The job: started under the probe (`tuimon run --headless`, its own PID), or --pid of one running.
2. First frame, the programs started alternately, `starts` times each: the time from the start
   until the emulated screen first shows its full frame, i.e. at least 90% of the non-blank rows
   it shows once settled (`settle` seconds after the start).
3. Steady state: both watching the job at once for `seconds` (after `warmup`): CPU % of one core
   (the process tree's user+system time), bytes written to the terminal per second, RSS (the
   tree's, peak), and whether torch got into the monitor.
Prints a table, then each program's ratios to the last one (tuimon / nvitop by default) beside the
budgets (docs/DESIGN.md): CPU and bytes at or below nvitop's, RSS <= 70 MB, first frame <= 0.5 s.
A program that cannot start (nvitop without NVML) is reported with its last screen line, and its
ratios are n/a. --program replaces the two (e.g. two builds of tuimon: "before=sh -c 'cd /tmp/old &&
exec python -m tuimon attach {pid}'": the build's own folder as the working directory, since `python -m`
puts that first on sys.path, before PYTHONPATH: "env PYTHONPATH=/tmp/old python -m ..." run from a
checkout measures the checkout).

Needs pyte (and nvitop to compare): pip install pyte nvitop. On the GPU machine carry them as
wheels: bash .gpu/fetch-wheels.sh nvitop pyte wcwidth.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import select
import shlex
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time

import psutil
import pyte

FULL = 0.9  # a frame is full at this share of the rows its settled screen shows


class Term:
    """A program in a pseudo-terminal of its own, its output counted and (optionally) emulated."""

    def __init__(self, name: str, cmd: list[str], cols: int, rows: int, emulate: bool = True):
        self.name, self.cols, self.rows = name, cols, rows
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(cols), LINES=str(rows))
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # (as users run it: bytecode cached, not compiled each start)
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
        os.close(slave)
        self.proc = psutil.Process(self.p.pid)
        self.emulate = emulate
        self.screen: pyte.Screen | None = None
        self.bytes = 0
        # What arrived, when, and the program's CPU time then: emulated only once it is watched no
        # more. Emulating as it came took this (Python) emulator 2-50 ms a 4 KB read, counted in the
        # program's first frame, while the pty filled and the program waited on its writes.
        self.arrived: list[tuple[float, bytes, float]] = []
        self.closed = False

    def fileno(self) -> int:
        return self.master

    def read(self) -> None:
        try:
            data = os.read(self.master, 65536)
        except OSError:  # (the program ended: its side of the pty is gone)
            self.closed = True
            return
        if not data:
            self.closed = True
            return
        self.bytes += len(data)
        if self.emulate:
            self.arrived.append((time.monotonic() - self.t0, data, self._own_cpu_s()))

    def _own_cpu_s(self) -> float:
        """The program's own CPU time (one read of /proc/PID/stat, not a walk of /proc for children:
        a monitor starting has none)."""
        try:
            t = self.proc.cpu_times()
            return t.user + t.system
        except psutil.Error:
            return 0.0

    def rows_seen(self) -> list[tuple[float, int, float]]:
        """(s since start, non-blank rows, CPU s) after each read, the output emulated now."""
        self.screen = pyte.Screen(self.cols, self.rows)
        stream, out = pyte.ByteStream(self.screen), []
        for t, data, cpu in self.arrived:
            stream.feed(data)
            out.append((t, self.non_blank(), cpu))
        return out

    def non_blank(self) -> int:
        return sum(1 for line in self.screen.display if line.strip()) if self.screen is not None else 0

    def last_line(self) -> str:
        if self.screen is None:
            return ""
        return next((line.strip() for line in reversed(self.screen.display) if line.strip()), "")

    def first_frame(self) -> tuple[float, float] | None:
        """When the screen first held FULL of the rows it shows at the end, and the CPU time the
        program had used by then (the work, whatever else the machine runs) (None: none, or it
        exited). The time is the arrival of the read that completed it."""
        seen = self.rows_seen()
        settled = self.non_blank()
        if not settled or self.p.poll() is not None:
            return None
        return next(((t, cpu) for t, n, cpu in seen if n >= FULL * settled), None)

    def cpu_s(self) -> float:
        total = 0.0
        for p in [self.proc, *self._children()]:
            try:
                t = p.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
            except psutil.Error:
                pass
        return total

    def rss(self) -> int:
        total = 0
        for p in [self.proc, *self._children()]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    def has_torch(self) -> bool:
        try:
            return any("libtorch" in (m.path or "") for m in self.proc.memory_maps())
        except psutil.Error:
            return False

    def _children(self) -> list[psutil.Process]:
        try:
            return self.proc.children(recursive=True)
        except psutil.Error:
            return []

    def stop(self) -> None:
        try:
            os.killpg(self.p.pid, signal.SIGTERM)
            self.p.wait(5)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()
        os.close(self.master)


def pump(terms: list[Term], until: float, every_s: float | None = None, each=None) -> None:
    """Read every terminal until the monotonic time `until`; call each() every `every_s`."""
    next_call = time.monotonic()
    while time.monotonic() < until:
        live = [t for t in terms if not t.closed]
        if not live:
            return
        ready, _, _ = select.select(live, [], [], 0.05)
        for t in ready:
            t.read()
        if each is not None and time.monotonic() >= next_call:
            each()
            next_call += every_s


def first_frames(programs: dict[str, list[str]], starts: int, settle: float, cols: int, rows: int) -> dict:
    """Each program started `starts` times, alternately, after one start each that is not counted
    (it writes the bytecode, and warms the page cache): its first-frame times (None: no frame)."""
    out: dict[str, list] = {name: [] for name in programs}
    notes: dict[str, str] = {}
    for name, cmd in programs.items():
        t = Term(name, cmd, cols, rows, emulate=False)
        pump([t], t.t0 + settle)
        t.stop()
    for _ in range(starts):
        for name, cmd in programs.items():
            t = Term(name, cmd, cols, rows)
            pump([t], t.t0 + settle)
            out[name].append(t.first_frame())
            if t.p.poll() is not None:
                notes[name] = f"exited ({t.p.returncode}): {t.last_line()[:100]}"
            t.stop()
    return {"times": out, "notes": notes}


def steady(programs: dict[str, list[str]], seconds: float, warmup: float, cols: int, rows: int) -> dict:
    """All programs at once, each in its own terminal: CPU, bytes and RSS over `seconds`."""
    terms = [Term(name, cmd, cols, rows, emulate=False) for name, cmd in programs.items()]
    start = time.monotonic()
    pump(terms, start + warmup)
    cpu0 = {t.name: t.cpu_s() for t in terms}
    bytes0 = {t.name: t.bytes for t in terms}
    peak = {t.name: 0 for t in terms}
    torch = {t.name: False for t in terms}

    def look():  # once a second: RSS, torch (reading smaps is not free: not more often)
        for t in terms:
            peak[t.name] = max(peak[t.name], t.rss())
            torch[t.name] = torch[t.name] or t.has_torch()

    t1 = time.monotonic()
    pump(terms, t1 + seconds, 1.0, look)
    span = time.monotonic() - t1
    out = {}
    for t in terms:
        alive = t.p.poll() is None
        out[t.name] = {"cpu_pct": (t.cpu_s() - cpu0[t.name]) / span * 100 if alive else None,
                       "bytes_per_s": (t.bytes - bytes0[t.name]) / span if alive else None,
                       "rss_mb": peak[t.name] / 1e6 if alive else None, "torch": torch[t.name], "alive": alive}
        t.stop()
    return out


def start_job(job: str) -> subprocess.Popen:
    """The training job under the probe, its output in a file (printed if it ends early)."""
    log = tempfile.NamedTemporaryFile("w+", prefix="monitor-cost-job-", suffix=".log", delete=False)
    cmd = [sys.executable, "-m", "tuimon", "run", "--headless", "--", *shlex.split(job)]
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    p.log = log.name
    return p


def fmt(v, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def ratio(a, b) -> str:
    return "n/a" if a is None or not b else f"{a / b:.2f}x"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60, help="steady state measured (default 60)")
    ap.add_argument("--warmup", type=float, default=5, help="seconds before the steady state (default 5)")
    ap.add_argument("--starts", type=int, default=3, help="first-frame starts per program (default 3)")
    ap.add_argument("--settle", type=float, default=4, help="seconds a start is watched (default 4)")
    ap.add_argument("--size", default="120x40")
    ap.add_argument("--interval", type=float, default=1.0, help="both monitors' refresh interval (default 1 s)")
    ap.add_argument("--job", default=f"{shlex.quote(sys.executable)} -m tuimon.workloads.demo_train",
                    help="the training job, started under the probe (default: the demo, this Python)")
    ap.add_argument("--job-warmup", type=float, default=15, help="seconds the job runs before measuring")
    ap.add_argument("--pid", type=int, help="watch this running job instead of starting one")
    ap.add_argument("--only", choices=("tuimon", "nvitop"), help="measure one program")
    ap.add_argument("--program", action="append", default=[], metavar="NAME=COMMAND",
                    help="a program to measure instead ({pid}: the job's), repeatable")
    a = ap.parse_args()
    cols, rows = map(int, a.size.split("x"))

    job = None
    if a.pid is None:
        job = start_job(a.job)
        time.sleep(a.job_warmup)
        if job.poll() is not None:
            sys.exit(f"the job ended early ({job.returncode}): {open(job.log).read()[-2000:]}")
    pid = a.pid or job.pid
    programs = {"tuimon": [sys.executable, "-m", "tuimon", "attach", str(pid), "--interval", f"{a.interval:g}"],
                "nvitop": [sys.executable, "-m", "nvitop", "--interval", f"{a.interval:g}"]}
    if a.only:
        programs = {a.only: programs[a.only]}
    if a.program:
        programs = {name: shlex.split(cmd.replace("{pid}", str(pid)))
                    for name, _, cmd in (spec.partition("=") for spec in a.program)}
    try:
        print(f"first frames: {a.starts} starts each, alternately ...", file=sys.stderr, flush=True)
        ff = first_frames(programs, a.starts, a.settle, cols, rows)
        print(f"steady state: {a.seconds:g} s, all at once ...", file=sys.stderr, flush=True)
        st = steady(programs, a.seconds, a.warmup, cols, rows)
    finally:
        if job is not None:
            os.killpg(job.pid, signal.SIGINT)  # (the demo stops at the end of its step)
            try:
                job.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(job.pid, signal.SIGKILL)

    print(f"\n{a.size}, interval {a.interval:g} s, job PID {pid}, {a.seconds:g} s steady state after {a.warmup:g} s, "
          f"first frame = {FULL:.0%} of the settled screen's rows")
    print(f"{'program':<10}{'CPU %':>8}{'KB/s':>8}{'RSS MB':>9}{'torch':>7}   first frames s (median; its CPU s, median)")
    for name in programs:
        s, times = st[name], ff["times"][name]
        got = [t for t in times if t is not None]
        med = f"({statistics.median(x for x, _ in got):.2f}; CPU {statistics.median(c for _, c in got):.2f})" if got else ""
        print(f"{name:<10}{fmt(s['cpu_pct'], '.2f'):>8}{fmt(s['bytes_per_s'] and s['bytes_per_s'] / 1e3, '.2f'):>8}"
              f"{fmt(s['rss_mb'], '.1f'):>9}{str(s['torch']):>7}   "
              + " / ".join(fmt(t and t[0], ".2f") for t in times) + f" {med}")
        if name in ff["notes"]:
            print(f"{'':<10}{ff['notes'][name]}")
    *names, last = list(programs)
    for name in names:
        t, n = st[name], st[last]
        tf = [x[0] for x in ff["times"][name] if x is not None]
        nf = [x[0] for x in ff["times"][last] if x is not None]
        print(f"\n{name} / {last}: CPU {ratio(t['cpu_pct'], n['cpu_pct'])} (budget <= 1.00x), "
              f"bytes {ratio(t['bytes_per_s'], n['bytes_per_s'])} (<= 1.00x), "
              f"RSS {ratio(t['rss_mb'], n['rss_mb'])} (<= 70 MB), "
              f"first frame {ratio(statistics.median(tf) if tf else None, statistics.median(nf) if nf else None)} "
              "(<= 0.5 s)", end="")
    print()


if __name__ == "__main__":
    main()
