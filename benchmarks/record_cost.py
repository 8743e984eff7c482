"""What `@record` (tuimon/model/record.py) costs: the CPU of making the monitor's record classes at
import, and records made per second, each build in fresh processes, alternating.

    python benchmarks/record_cost.py [--runs 5] [--build NAME=DIR ...]

A build is a checkout (default: this one, "this"); its tuimon is put first on sys.path. Per run, a
fresh interpreter imports the modules that define the monitor's records, then makes each of those
classes again with `record` from the same fields (thread CPU: the dataclass machinery a start pays),
then makes GpuSample and GpuProcess records in a loop (records/s). Prints the median
and the range of the runs per build, last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import dataclasses, gc, importlib, json, sys, time
sys.path.insert(0, sys.argv[1])
from tuimon.model.record import record
for name in ("tuimon.model", "tuimon.monitor.state", "tuimon.analysis.verdicts", "tuimon.analysis.stall",
             "tuimon.analysis.batches", "tuimon.capture.commands", "tuimon.sources.pyspy"):
    importlib.import_module(name)
assert record.__module__ == "tuimon.model.record" and sys.modules[record.__module__].__file__.startswith(sys.argv[1])
made = [c for c in gc.get_objects() if isinstance(c, type) and "__record_compared__" in c.__dict__]
def again(c):  # the class's fields, as a new class body for @record
    ns = {"__annotations__": {}, "__module__": c.__module__, "__qualname__": c.__qualname__}
    for f in dataclasses.fields(c):
        ns["__annotations__"][f.name] = f.type
        ns[f.name] = dataclasses.field(default=f.default, default_factory=f.default_factory, compare=f.compare,
                                       hash=f.hash, repr=f.repr)
    kw = all(f.kw_only for f in dataclasses.fields(c))
    return type(c.__name__, (), ns), kw
bodies = [again(c) for c in made]
t = time.thread_time_ns()
for body, kw in bodies:
    record(kw_only=kw)(body)
class_ms = (time.thread_time_ns() - t) / 1e6
from tuimon.model.gpu import GpuProcess, GpuSample
n, t = 200_000, time.perf_counter()
for i in range(n):
    GpuSample(index=i & 7, t=i, gpm=True, sm_active=50.0, dram_bw=20.0)
per_s = n / (time.perf_counter() - t)
t = time.perf_counter()
for i in range(n):
    GpuProcess(pid=i, gpu_mem=1 << 30, name="python")
per_s2 = n / (time.perf_counter() - t)
print(json.dumps({"classes": len(bodies), "class_ms": class_ms, "gpu_sample_per_s": per_s,
                  "gpu_process_per_s": per_s2}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--build", action="append", help="NAME=DIR (a checkout); default: this=.")
    a = p.parse_args()
    builds = [b.split("=", 1) for b in (a.build or [f"this={os.getcwd()}"])]
    got: dict[str, list[dict[str, float]]] = {name: [] for name, _ in builds}
    for _ in range(a.runs):
        for name, path in builds:  # (alternating: a busy machine's drift falls on each build alike)
            out = subprocess.run([sys.executable, "-c", CHILD, os.path.abspath(path)], capture_output=True,
                                 text=True, check=True, env=dict(os.environ, PYTHONDONTWRITEBYTECODE="")).stdout
            got[name].append(json.loads(out.splitlines()[-1]))
    print(f"{a.runs} runs each, Python {sys.version.split()[0]}; median (min..max)")
    print(f"{'build':<12}{'classes':>8}{'class-making ms':>26}{'GpuSample/s':>28}{'GpuProcess/s':>28}")
    def cell(runs: list[dict[str, float]], key: str, fmt: str) -> str:
        xs = [r[key] for r in runs]
        return f"{format(statistics.median(xs), fmt)} ({format(min(xs), fmt)}..{format(max(xs), fmt)})"

    for name, runs in got.items():
        print(f"{name:<12}{int(runs[0]['classes']):>8}{cell(runs, 'class_ms', '.1f'):>26}"
              f"{cell(runs, 'gpu_sample_per_s', ',.0f'):>28}{cell(runs, 'gpu_process_per_s', ',.0f'):>28}")


if __name__ == "__main__":
    main()
