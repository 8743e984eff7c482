"""The CPU of the probe's own threads inside a training job, by thread, with a monitor attached:
what they take from the job, and the GIL they hold while they run Python (issue 22: the loop thread
waits for the GIL each time one of them holds it).

    python benchmarks/probe_threads.py [--seconds 30] [--rounds 2] [--program NAME=TREE ...]

Each round runs the bundled demo job (`python -m tuimon.workloads.demo_train`) under `tuimon run
--headless` from each TREE in turn (a checkout or a `git archive` of one, with its extension built
there; default: this checkout), attaches `tuimon attach --plain` to it, names the job's threads with
`py-spy dump` and reads each thread's time on a CPU from /proc/PID/task/TID/schedstat (ns, exact)
over `seconds`. Threads that are not Python's (the native sampler's, torch's) are summed as "native".
Prints ms of CPU per second per thread, and each program's ratio to the first for tuimon's threads
together and for those that hold the GIL (tuimon-sampler, tuimon-control)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIL_THREADS = ("tuimon-sampler", "tuimon-control")


def thread_cpu_ns(pid: int) -> dict[int, int]:
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0])
        except (OSError, ValueError):
            pass
    return out


def one_run(tree: str, seconds: float, pyspy: str) -> dict[str, float]:
    env = dict(os.environ, TUIMON_SHM_DIR=tempfile.mkdtemp(prefix="probe-threads-"), PYTHONPATH=tree)
    run = [sys.executable, "-m", "tuimon"]
    job = subprocess.Popen([*run, "run", "--headless", "--", sys.executable, "-m", "tuimon.workloads.demo_train"],
                           cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    monitor = None
    try:
        time.sleep(14)  # (torch imported, the workers up, steps going)
        monitor = subprocess.Popen([*run, "attach", str(job.pid), "--plain", "--interval", "1"], cwd=tree, env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(3)
        dump = subprocess.run([pyspy, "dump", "--pid", str(job.pid)], capture_output=True, text=True).stdout
        names = {int(tid): name for tid, name in re.findall(r'Thread (\d+) \(\w+\): "([^"]+)"', dump)}
        names[job.pid] = "MainThread"  # (its thread id is the PID: named even when a dump missed it)
        before, t0 = thread_cpu_ns(job.pid), time.monotonic()
        time.sleep(seconds)
        after, span = thread_cpu_ns(job.pid), time.monotonic() - t0
        rows: dict[str, float] = {}
        for tid, ns in after.items():
            name = names.get(tid, "native")
            rows[name] = rows.get(name, 0.0) + (ns - before.get(tid, ns)) / 1e6 / span
        return rows
    finally:
        for p in (monitor, job):
            if p is not None:
                p.terminate()
                p.wait()
        shutil.rmtree(env["TUIMON_SHM_DIR"], ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--program", action="append", default=[], metavar="NAME=TREE")
    a = ap.parse_args()
    programs = dict(p.split("=", 1) for p in a.program) or {"this": ROOT}
    pyspy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in programs}
    for _ in range(a.rounds):
        for name, tree in programs.items():  # (alternately: drifts of the machine hit each alike)
            runs[name].append(one_run(os.path.abspath(tree), a.seconds, pyspy))
            print(name, {k: round(v, 2) for k, v in sorted(runs[name][-1].items(), key=lambda kv: -kv[1])}, flush=True)

    def median(name: str, threads) -> float:
        return statistics.median(sum(r.get(t, 0.0) for t in threads) for r in runs[name])

    print(f"\ndemo job, monitor attached, {a.seconds:g} s x {a.rounds} rounds: ms of CPU per second (median)")
    print(f"{'program':12} {'tuimon-sampler':>15} {'tuimon-control':>15} {'native':>8} {'GIL threads':>12} {'ratio':>6}")
    first = next(iter(programs))
    for name in programs:
        gil = median(name, GIL_THREADS)
        print(f"{name:12} {median(name, ['tuimon-sampler']):15.2f} {median(name, ['tuimon-control']):15.2f} "
              f"{median(name, ['native']):8.2f} {gil:12.2f} {gil / median(first, GIL_THREADS):6.2f}")


if __name__ == "__main__":
    main()
