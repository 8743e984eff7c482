"""What a window through Kineto's on-demand path costs the job, beside today's torch.profiler window,
in one run on one job (issue 41): the job runs under `tuimon run --headless` with KINETO_USE_DAEMON=1,
this script is its "dynolog" endpoint (tuimon/capture/kineto_daemon.py), and the windows alternate:
a Kineto window of N optimizer steps (the config handed at the job's next poll, the trace written by
Kineto's threads), then a torch.profiler window of N steps through the probe. Each judged as
capture/cost.py judges every window, from the job's own step times: its worst step from the window's
first to just past the end of its work (Kineto: its trace file there; torch.profiler: its state done)
against the worst of the normal steps before it (50, or as many as it judges), and the time lost
beyond the typical step.

    python benchmarks/kineto_cost.py [--steps 10] [--windows 3] [--kinds kineto,torch.profiler,none]
        [--none-span 1.2] [--top 5] [--top-json FILE] [--schedstat] [-- training command...]

--kinds none is the control: no window asked, the --none-span seconds after a moment judged as a window
(the job's own noise, judged the same way). On this 2-core machine its worst step varies as much as a
Kineto window's (docs/measurements.md); a window's cost is what it adds to that.

--top N prints the N kernels of most GPU time in each Kineto window (trace_summary.summarize; its top
host operators by self time where the trace has no kernels); --top-json FILE appends each Kineto
window's as a JSON line. A summary table comes last: per path, the worst window's ratio and time lost,
pass when every window's worst step is at most 1.2x the worst normal one and it lost at most one
typical step.

The job: tests/workloads/small_ops.py (~1,500 small operators a step on the CPU) unless a command
is given. A Kineto window's first step is the first that began after the job took its config.

--schedstat: each Kineto window's slow steps split by the loop thread's /proc schedstat into on-CPU,
run-queue wait and the rest (blocked or asleep), with the host's steal time over the step.

--dumps FILE: where the loop waits in a Kineto window (issue 41: a job whose windows miss the budget
says where its loop waited). From the config's handing until its trace is written, `py-spy dump
--nonblocking` (Python frames, the job not stopped) every --dump-every seconds, each dump appended to FILE
with its time; after the window, the dumps taken inside its worst step are printed (the loop
thread's top frames). Needs py-spy (tuimon's find_pyspy).
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import TypeVar

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tuimon.capture.client import CaptureClient  # noqa: E402
from tuimon.capture.cost import NORMAL_STEPS, StepLog, window_cost  # noqa: E402
from tuimon.capture.kineto_daemon import KinetoEndpoint, trace_file  # noqa: E402
from tuimon.capture.trace_summary import summarize  # noqa: E402
from tuimon.monitor.target import open_channel  # noqa: E402

JOB = [sys.executable, os.path.join(ROOT, "tests", "workloads", "small_ops.py"), "--seconds", "600"]


def channel_of(pid: int, timeout_s: float):
    """The channel of the job `tuimon run` started as pid (a reader), once it is up; AssertionError
    after timeout_s without one."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return open_channel(pid)[0]
        except Exception:  # noqa: BLE001 - not up yet
            assert time.monotonic() < deadline, "no channel"
            time.sleep(0.1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--show-steps", action="store_true", help="print each window's step times (ms)")
    ap.add_argument("--kinds", default="kineto,torch.profiler", help="which windows, in turn (comma-separated)")
    ap.add_argument("--job-log", help="the job's output to this file (default: dropped)")
    ap.add_argument("--top", type=int, default=0, help="print the top N kernels of each Kineto window")
    ap.add_argument("--top-json", help="append each Kineto window's top kernels to this file (JSON lines)")
    ap.add_argument("--dumps", help="py-spy dumps during each Kineto window to this file; those in its worst step printed")
    ap.add_argument("--dump-every", type=float, default=0.05, help="seconds between two dumps (default 0.05)")
    ap.add_argument("--none-span", type=float, default=1.2,
                    help="kind 'none' (the control: no window): the seconds judged (~ a Kineto window's, to its trace)")
    ap.add_argument("--schedstat", action="store_true",
                    help="the loop thread's on-CPU and run-queue time in a Kineto window's slow steps (schedstat)")
    ap.add_argument("--nice-kineto", choices=("new", "all"),
                    help="an experiment: the job's threads named 'Kineto*' or new since the config was handed (new), "
                         "or all but its main thread (all), set to nice 19 (for good: unprivileged, it cannot be undone)")
    ap.add_argument("command", nargs="*")
    a = ap.parse_args()
    if a.nice_kineto and a.kinds != "kineto":
        ap.error("--nice-kineto goes with --kinds kineto (the nice value stays: later windows would run beside it)")
    job_cmd = a.command or JOB
    out = tempfile.mkdtemp(prefix="tuimon-kineto-")
    endpoint = KinetoEndpoint()
    env = dict(os.environ, KINETO_USE_DAEMON="1", KINETO_LOG_LEVEL="6", TUIMON_CAPTURE_DIR=out,
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    run = [sys.executable, "-m", "tuimon", "run", "--headless", "--", *job_cmd]
    job_log = open(a.job_log, "w") if a.job_log else subprocess.DEVNULL
    job = subprocess.Popen(run, cwd=ROOT, env=env, stdout=job_log, stderr=subprocess.STDOUT)
    stop = threading.Event()
    rows = []
    try:
        reader = channel_of(job.pid, 60)
        pid = reader.info.pid
        log = StepLog()
        lock = threading.Lock()

        def drain() -> None:
            while not stop.wait(0.05):
                batch = reader.drain()
                with lock:
                    log.add(batch.records)

        threading.Thread(target=drain, daemon=True).start()
        client = CaptureClient(reader.path, pid, reader.info.start_ticks)
        assert endpoint.wait_registered(pid, 60), "the job never asked the endpoint (no Kineto daemon client?)"
        while reader.steps < 3 * NORMAL_STEPS + 20:  # (past the warm-up: a long window judges more steps than 50)
            time.sleep(0.2)
        time.sleep(2.0)
        most_steps = NORMAL_STEPS  # the most steps a window judged yet (the next one's normal steps reach as far)
        print(f"job: {' '.join(job_cmd[1:])}; {a.windows} windows of {a.steps} steps each, of each kind")
        print(f"{'path':<16}{'window':>7}{'worst normal':>14}{'worst':>10}{'ratio':>8}{'over':>6}{'lost':>10}"
              f"{'normal':>10}{'typical':>10}  notes", flush=True)
        for w in range(a.windows):
            for kind in a.kinds.split(","):
                dumper = None
                if job.poll() is not None:
                    print(f"the job ended: exit {job.returncode} (its output: {a.job_log or 'dropped'})", flush=True)
                    return
                if kind == "kineto":
                    base = os.path.join(out, f"kineto-{pid}-{w + 1}.json")
                    renicer = Renicer(pid, a.nice_kineto == "all") if a.nice_kineto else None  # (threads before the ask)
                    asked = time.monotonic()
                    endpoint.request_trace(pid, base, iterations=a.steps)
                    while not endpoint.handed(pid) and time.monotonic() - asked < 30:
                        time.sleep(0.01)
                    handed_ns = int(endpoint.handed(pid) * 1e9)
                    path = trace_file(base, pid)
                    niced = renicer.start() if renicer is not None else None
                    dumper = Dumper(pid, a.dumps, a.dump_every, f"window {w + 1}").start() if a.dumps else None
                    sched = Schedstat(pid).start() if a.schedstat else None
                    while not os.path.exists(path) and time.monotonic() - asked < 120:
                        time.sleep(0.02)
                    done_ns = time.monotonic_ns()
                    if niced is not None:
                        niced.stop()
                    if dumper is not None or sched is not None:
                        time.sleep(0.5)  # (the step the trace's writing slowed may end after it)
                    if dumper is not None:
                        dumper.stop()
                    if sched is not None:
                        sched.stop()
                    with lock:
                        first = next((i for i, t0, _ in log.steps if t0 >= handed_ns), None)
                    while first is None:  # (its first step has not come in yet)
                        time.sleep(0.1)
                        with lock:
                            first = next((i for i, t0, _ in log.steps if t0 >= handed_ns), None)
                    last = first + a.steps - 1
                    s = summarize(path, max(3, a.top))
                    top_rows = s["top_kernels"] or s["top_host_self"]
                    note = (f"took config {(handed_ns / 1e9 - asked):.1f} s after the ask; trace "
                            f"{os.path.getsize(path) / 2**20:.1f} MiB, {(done_ns - handed_ns) / 1e9:.1f} s after; "
                            + (f"niced {niced.said()}; " if niced is not None else "") + "top: "
                            + ", ".join(f"{r['name'][:40]} {r['ms']:.0f} ms" for r in
                                        (s["top_device"] or s["top_host_self"])[:2]))
                elif kind == "none":  # the control: nothing asked, the same judgment over as long a span
                    asked = time.monotonic_ns()
                    time.sleep(a.none_span)
                    done_ns = time.monotonic_ns()
                    note = f"no window: the {a.none_span:.1f} s after a moment, judged as a window"
                    first = None
                    while first is None and time.monotonic_ns() - done_ns < 60e9:  # (steps longer than the span)
                        with lock:
                            first = next((i for i, t0, _ in log.steps if t0 >= asked), None)
                        time.sleep(0.05 if first is None else 0)
                    if first is None:  # (no step began in a minute: a stalled job)
                        rows.append((kind, w + 1, None, note))
                        print(f"{kind:<16}{w + 1:>7}  (no cost: no step began) {note}", flush=True)
                        continue
                    last = first + a.steps - 1
                else:
                    st = client.wait(client.request(steps=a.steps), 300)
                    first, last, done_ns = st.first_step, st.last_step, st.updated_ns
                    note = st.message[:110]
                end = time.monotonic() + 60
                cost = None
                while cost is None and time.monotonic() < end:
                    time.sleep(0.2)
                    with lock:
                        cost = window_cost(list(log.steps), first, last, done_ns)
                rows.append((kind, w + 1, cost, note))
                if cost is None:
                    print(f"{kind:<16}{w + 1:>7}  (no cost: steps missing) {note}", flush=True)
                else:
                    print(f"{kind:<16}{w + 1:>7}{cost.worst_normal_ms:>11.1f} ms{cost.worst_ms:>7.1f} ms"
                          f"{cost.ratio:>7.2f}x{cost.over:>6}{cost.lost_ms:>7.0f} ms{cost.normal_lost_ms:>7.0f} ms"
                          f"{cost.typical_ms:>7.1f} ms  {note}",
                          flush=True)
                    if a.show_steps:
                        with lock:
                            d = {i: (t1 - t0) / 1e6 for i, t0, t1 in log.steps}
                        span = range(first - 3, first + cost.steps + 1)
                        print("    steps " + " ".join(f"{d[i]:.0f}" + ("*" if first <= i <= last else "")
                                                      for i in span if i in d), flush=True)
                if kind == "kineto" and dumper is not None and cost is not None:
                    with lock:
                        in_window = [(i, t0, t1) for i, t0, t1 in log.steps if first <= i <= first + cost.steps]
                    dumper.report(in_window, 1.2 * cost.worst_normal_ms)
                if kind == "kineto" and sched is not None and cost is not None:
                    with lock:
                        in_window = [(i, t0, t1) for i, t0, t1 in log.steps if first <= i <= first + cost.steps]
                    sched.report(in_window, 1.2 * cost.worst_normal_ms)
                if kind == "kineto" and (a.top or a.top_json):
                    shown = top_rows[:a.top or 5]
                    what = "kernels" if s["top_kernels"] else "host operators (self time; no kernels)"
                    if a.top:
                        print(f"    kineto window {w + 1}: top {len(shown)} {what} of {s['kernels']} kernels "
                              f"({s['kernel_ms']:.0f} ms)", flush=True)
                        for r in shown:
                            print(f"      {r['ms']:>9.1f} ms {r['calls']:>6}x  {r['name'][:150]}", flush=True)
                    if a.top_json:
                        with open(a.top_json, "a") as f:
                            f.write(json.dumps({"window": w + 1, "what": what, "kernels": s["kernels"],
                                                "kernel_ms": s["kernel_ms"], "top": shown}) + "\n")
                if cost is not None:
                    most_steps = max(most_steps, cost.steps)
                    time.sleep(max(2.0, most_steps * cost.typical_ms / 1e3 * 1.5))  # (the next judged on clean steps)
        summary(rows)
    finally:
        stop.set()
        if job.poll() is not None:
            print(f"the job ended on its own: exit {job.returncode}", flush=True)
        job.terminate()
        job.wait()
        endpoint.close()
        for f in glob.glob(os.path.join(out, "*")):
            os.unlink(f)
        os.rmdir(out)


_B = TypeVar("_B", bound="_Background")


class _Background:
    """A daemon thread that runs _run() from start() until stop() (which waits up to 10 s for it)."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self: _B) -> _B:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _run(self) -> None:
        raise NotImplementedError


def _slow_steps(steps: list[tuple[int, int, int]], slow_ms: float) -> list[tuple[int, int, int]]:
    """The 8 longest of (index, t0 ns, t1 ns) over slow_ms, longest first; the longest where none is over."""
    longest = sorted(steps, key=lambda s: s[1] - s[2])
    return [s for s in longest if (s[2] - s[1]) / 1e6 > slow_ms][:8] or longest[:1]


class Renicer(_Background):
    """(--nice-kineto) Every 10 ms from start() until stop(): the job's threads named Kineto* or not
    there when it was made (all but the main thread, with every_thread) set to nice 19, each once and
    for good (an unprivileged process cannot lower a nice value again)."""

    def __init__(self, pid: int, every_thread: bool = False) -> None:
        self.pid, self.every_thread = pid, every_thread
        self.before = set(self._tasks())
        self.niced: dict[int, str] = {}
        super().__init__()

    def _tasks(self) -> list[int]:
        try:
            return [t.id for t in psutil.Process(self.pid).threads()]
        except psutil.Error:
            return []

    def said(self) -> str:
        return ", ".join(f"{tid} {name}" for tid, name in self.niced.items()) or "none"

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            for tid in self._tasks():
                if tid in self.niced:
                    continue
                try:
                    with open(f"/proc/{self.pid}/task/{tid}/comm") as f:  # (a thread's name: psutil has none)
                        name = f.read().strip()
                    if name.startswith("Kineto") or tid not in self.before or (self.every_thread and tid != self.pid):
                        os.setpriority(os.PRIO_PROCESS, tid, 19)
                        self.niced[tid] = name
                except OSError:
                    pass


class Dumper(_Background):
    """`py-spy dump --nonblocking` of the job every `every` seconds on a thread, each dump (monotonic ns
    before and after it) kept and appended to a file; report() prints those inside the worst step."""

    def __init__(self, pid: int, path: str, every: float, label: str) -> None:
        from tuimon.sources.pyspy import find_pyspy

        self.exe = find_pyspy()
        self.pid, self.path, self.every, self.label = pid, path, every, label
        self.dumps: list[tuple[int, int, str]] = []
        if self.exe is None:
            print("    (--dumps: no py-spy here)", flush=True)
        super().__init__()

    def stop(self) -> None:
        super().stop()
        with open(self.path, "a") as f:
            for t0, t1, text in self.dumps:
                f.write(f"=== {self.label}: dump {t0}..{t1} ns\n{text}\n")

    def _run(self) -> None:
        while self.exe is not None and not self._stop.is_set():
            t0 = time.monotonic_ns()
            r = subprocess.run([self.exe, "dump", "--pid", str(self.pid), "--nonblocking"],
                               capture_output=True, text=True, timeout=10)
            self.dumps.append((t0, time.monotonic_ns(), r.stdout + r.stderr))
            self._stop.wait(self.every)

    def report(self, steps: list[tuple[int, int, int]], slow_ms: float) -> None:
        """steps: the window's (index, t0 ns, t1 ns). The dumps taken inside its 8 longest steps over slow_ms
        (its longest where none is over), with the loop thread's innermost frames."""
        if not steps or not self.dumps:
            print(f"    dumps: {len(self.dumps)} taken, {len(steps)} steps: nothing to match", flush=True)
            return
        slow = _slow_steps(steps, slow_ms)
        print(f"    dumps: {len(self.dumps)} in the window; its 8 longest steps over {slow_ms:.0f} ms (or its longest): "
              + ", ".join(f"{i} ({(t1 - t0) / 1e6:.0f} ms)" for i, t0, t1 in slow), flush=True)
        for i, s0, s1 in slow:
            for t0, _, text in (d for d in self.dumps if d[0] >= s0 and d[1] <= s1):
                print(f"      step {i} +{(t0 - s0) / 1e6:.0f} ms: " + " <- ".join(_loop_frames(text)[:4]), flush=True)


class Schedstat(_Background):
    """(--schedstat) The loop thread's (the job's main thread) /proc schedstat every ~1 ms from start() to
    stop(): time on a CPU and time runnable but waiting for one (run queue), cumulative ns; report()
    splits each slow step's wall time into on-CPU, run-queue wait and the rest (asleep or blocked: a
    lock, a page fault's wait, I/O), between the samples around it. The on-CPU count moves in jumps (the
    kernel adds a running thread's time at ticks and switches): a few ms either way, so "the rest" can
    read below 0."""

    def __init__(self, pid: int) -> None:
        self.path = f"/proc/{pid}/task/{pid}/schedstat"
        self.samples: list[tuple[int, int, int, int]] = []  # (monotonic ns, on-CPU ns, run-queue ns, steal ticks)
        super().__init__()

    def _run(self) -> None:
        try:
            f = open(self.path, "rb", buffering=0)  # noqa: SIM115 - read again at each sample
        except OSError:
            return
        with f, open("/proc/stat", "rb") as stat:
            while not self._stop.wait(0.001):
                try:
                    f.seek(0)
                    stat.seek(0)
                    run, wait, _ = f.read().split()
                    steal = int(stat.readline().split()[8])  # (the "cpu" line: all CPUs' steal, USER_HZ ticks)
                except (OSError, ValueError, IndexError):  # (the job ended)
                    return
                self.samples.append((time.monotonic_ns(), int(run), int(wait), steal))

    def report(self, steps: list[tuple[int, int, int]], slow_ms: float) -> None:
        for i, t0, t1 in _slow_steps(steps, slow_ms):
            before = [s for s in self.samples if s[0] <= t0]
            after = [s for s in self.samples if s[0] >= t1]
            if not before or not after:
                print(f"    schedstat step {i}: not sampled on both sides (it began before the sampling)", flush=True)
                continue
            (a0, r0, w0, s0), (a1, r1, w1, s1) = before[-1], after[0]
            wall = a1 - a0
            print(f"    schedstat step {i} ({(t1 - t0) / 1e6:.1f} ms from {t0 / 1e9:.4f} s; samples span "
                  f"{wall / 1e6:.1f} ms): on-CPU "
                  f"{(r1 - r0) / 1e6:.1f} ms, run-queue {(w1 - w0) / 1e6:.1f} ms, "
                  f"off-CPU otherwise {(wall - (r1 - r0) - (w1 - w0)) / 1e6:.1f} ms; steal, all CPUs together "
                  f"{(s1 - s0) * 1000 / os.sysconf('SC_CLK_TCK'):.0f} ms (+-10)", flush=True)


def _loop_frames(text: str) -> list[str]:
    """The first thread's frames of a py-spy dump (its main thread: the loop's in these jobs), innermost
    first, as 'function (file:line)' with the file's base name."""
    frames: list[str] = []
    seen_thread = False
    for line in text.splitlines():
        if line.startswith("Thread "):
            if seen_thread:
                break
            seen_thread = True
        elif seen_thread and line.startswith("    ") and line.strip():
            fn, _, where = line.strip().partition(" (")
            frames.append(f"{fn} ({os.path.basename(where.rstrip(')'))})")
    return frames or [text.strip().splitlines()[0][:80] if text.strip() else "(empty dump)"]


def summary(rows) -> None:
    """Per path, its windows judged against issue 41's bar: worst step <= 1.2x the worst normal one,
    time lost <= one typical step (beyond what as many normal steps lose: the 'normal' column)."""
    print(f"=== summary: {'path':<16}{'windows':>8}{'worst ratio':>13}{'worst lost':>12}{'typical':>10}  verdict")
    for kind in dict.fromkeys(k for k, *_ in rows):  # (the kinds run, in their order)
        costs = [c for k, _, c, _ in rows if k == kind]
        got = [c for c in costs if c is not None]
        if not got:
            print(f"             {kind:<16}{len(costs):>8}  (no window judged)  FAIL")
            continue
        ok = len(got) == len(costs) and all(c.ratio <= 1.2 and c.lost_ms - c.normal_lost_ms <= c.typical_ms for c in got)
        verdict = ("PASS" if ok else "FAIL") if kind != "none" else f"(the control: {'within' if ok else 'over'})"
        worst = max(got, key=lambda c: c.ratio)
        lost = max(got, key=lambda c: c.lost_ms / c.typical_ms if c.typical_ms else c.lost_ms)
        print(f"             {kind:<16}{len(costs):>8}{worst.ratio:>12.2f}x{lost.lost_ms:>9.0f} ms{lost.typical_ms:>7.1f} ms  "
              f"{verdict}; each: " + ", ".join(f"{c.ratio:.2f}x" for c in got), flush=True)


if __name__ == "__main__":
    main()
