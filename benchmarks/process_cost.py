"""What sampling the process tree costs the monitor, each cycle: ProcessSampler.sample() (the target
and its descendants), host_sample() and ProcessNames.describe(), this tree against another revision's
(--before, default HEAD), alternating in one run on the same processes, in the steady state (every
process seen before, PSS read already). The tree is sampled twice over: kept (no PID handed out on the
machine since the last sample: the usual case on a quiet machine) and listed again each sample (a
machine that forks all the time), by holding or moving procinfo.last_pid in each arm.

    python benchmarks/process_cost.py [--before REV] [--children 4] [--threads 24] [--rounds 10] [--samples 40]
"""

import argparse
import importlib
import os
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# a job: a process with `threads` idle threads and `children` workers, each with as many
JOB = """
import subprocess, sys, threading, time
children, threads = int(sys.argv[1]), int(sys.argv[2])
WORKER = "import threading, time\\nfor _ in range(%d): threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\\ntime.sleep(600)"
for _ in range(threads):
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
kids = [subprocess.Popen([sys.executable, "-c", WORKER % threads]) for _ in range(children)]
print(" ".join(str(k.pid) for k in kids), flush=True)
time.sleep(600)
"""


def load_before(rev: str, into: str) -> str:
    """REV's tuimon package, unpacked as `tuimon_before` (its imports are relative): its name."""
    data = subprocess.run(["git", "-C", ROOT, "archive", rev, "tuimon"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=data, check=True)
    os.rename(os.path.join(into, "tuimon"), os.path.join(into, "tuimon_before"))
    sys.path.insert(0, into)
    return "tuimon_before"


def per_sample_us(fn, n: int) -> tuple[float, float]:
    """(CPU us, wall us) per call, over n calls."""
    c0, w0 = time.thread_time(), time.perf_counter()
    for _ in range(n):
        fn()
    return (time.thread_time() - c0) / n * 1e6, (time.perf_counter() - w0) / n * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", default="HEAD")
    ap.add_argument("--children", type=int, default=4)
    ap.add_argument("--threads", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--samples", type=int, default=40)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tuimon-process-cost-")
    arms = {"this tree": "tuimon", f"before ({a.before})": load_before(a.before, tmp)}
    job = subprocess.Popen([sys.executable, "-c", JOB, str(a.children), str(a.threads)], stdout=subprocess.PIPE,
                           text=True)
    try:
        kids = [int(x) for x in job.stdout.readline().split()]
        time.sleep(1.0)  # (the workers' threads started)
        mods = {name: importlib.import_module(f"{pkg}.sources.process") for name, pkg in arms.items()}
        samplers = {name: m.ProcessSampler(job.pid) for name, m in mods.items()}
        names = {name: m.ProcessNames() for name, m in mods.items()}
        for name, m in mods.items():  # (steady state: every process seen, each PSS read)
            for _ in range(a.children + 3):
                samplers[name].sample()
            m.host_sample()
            names[name].describe(kids[0])
            assert len(samplers[name].sample().procs) == a.children + 1, name
        cases = {
            "sample(), tree kept": lambda name: samplers[name].sample,
            "sample(), tree listed": lambda name: samplers[name].sample,
            "host_sample()": lambda name: mods[name].host_sample,
            "ProcessNames.describe() (cached)": lambda name: lambda: names[name].describe(kids[0]),
        }
        got: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for _ in range(a.rounds):
            for case, make in cases.items():
                order = list(arms)
                random.shuffle(order)
                for name in order:
                    procinfo = sys.modules[f"{arms[name]}.channel.procinfo"]
                    real = procinfo.last_pid
                    procinfo.last_pid = time.monotonic_ns if case.endswith("listed") else (lambda: 1)
                    try:
                        got.setdefault((case, name), []).append(per_sample_us(make(name), a.samples))
                    finally:
                        procinfo.last_pid = real
    finally:
        subprocess.run(["kill", "-9", *map(str, kids)], capture_output=True) if "kids" in locals() else None
        job.kill()
        job.wait()
    nproc = sum(1 for e in os.listdir("/proc") if e.isdigit())
    print(f"a job of {a.children + 1} processes, {a.threads + 1} threads each; {nproc} processes on the machine; "
          f"{a.rounds} rounds of {a.samples} calls per arm, alternating; medians of the rounds")
    print(f"{'call':<36}{'arm':<22}{'CPU us':>10}{'wall us':>10}{'CPU ratio':>11}")
    for case in cases:
        base = None
        for name in reversed(list(arms)):
            runs = sorted(got[(case, name)])
            cpu = runs[len(runs) // 2][0]
            wall = sorted(w for _, w in runs)[len(runs) // 2]
            ratio = "" if base is None else f"{cpu / base:.2f}x"
            base = cpu if base is None else base
            print(f"{case:<36}{name:<22}{cpu:>10.0f}{wall:>10.0f}{ratio:>11}")


if __name__ == "__main__":
    main()
