"""What loading the probe into a running job costs it, from the job's own step times (issue 40's budget:
the worst step around the load at most 1.2x the worst of the 50 before it; the steps after it within
the probe's 1%).

    python benchmarks/inject_cost.py [--pairs 3] [--seconds 30] [--inject-at 8]

Each pair runs tests/workloads/plain_loop.py twice, in alternating order: plainly, and plainly with
`tuimon inject` at --inject-at seconds. The loop writes each step's end (time.monotonic()); from them:
- pause: the longest step that overlaps the load (from the inject command's start to 1 s after it
  returned) over the longest of the 50 steps before it;
- steps/s from 2 s after the load to the end, injected over plain (same span of the other run).
Prints a table last."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOOP = ROOT / "tests" / "workloads" / "plain_loop.py"


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TUIMON_") and k != "PYTHONPATH"}


def run(seconds: float, inject_at: float | None) -> tuple[list[float], float, tuple[float, float] | None]:
    with tempfile.TemporaryDirectory() as d:
        truth = Path(d) / "truth.json"
        t_start = time.monotonic()
        ready = Path(d) / "ready"
        job = subprocess.Popen([sys.executable, str(LOOP), "--seconds", str(seconds), "--truth", str(truth),
                                "--ready", str(ready)], env=env(), stdout=subprocess.DEVNULL)
        while not ready.exists() and job.poll() is None:  # (50 steps done: the loop is in its stride)
            time.sleep(0.05)
        load = None
        if inject_at is not None:
            time.sleep(inject_at)
            a = time.monotonic()
            r = subprocess.run([sys.executable, "-m", "tuimon", "inject", str(job.pid)], capture_output=True, text=True)
            load = (a, time.monotonic())
            if r.returncode != 0:
                print(r.stderr, file=sys.stderr)
        job.wait()
        return json.loads(truth.read_text())["step_ends"], t_start, load


def rate(ends: list[float], a: float, b: float) -> float:
    n = sum(1 for e in ends if a <= e <= b)
    return n / (b - a)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--inject-at", type=float, default=5, help="seconds after the loop's 50th step")
    args = ap.parse_args()
    rows = []
    for k in range(args.pairs):
        order = (None, args.inject_at) if k % 2 == 0 else (args.inject_at, None)
        runs = {}
        for at in order:
            runs[at is not None] = run(args.seconds, at)
        (ends, _, load), (plain_ends, _, _) = runs[True], runs[False]
        assert load is not None
        steps = [(b - a, a, b) for a, b in zip(ends, ends[1:], strict=False)]
        before = [d for d, a, b in steps if b <= load[0]][-50:]
        around = [d for d, a, b in steps if b >= load[0] and a <= load[1] + 1.0]
        pause = max(around) / max(before)
        # steps/s from 2 s after the load to the end, against the plain run's over the same span of its steps
        # (counted from each run's 50th step: the runs' start-up times differ)
        span = (load[1] + 2 - ends[49], ends[-1] - ends[49])
        ratio = rate(ends, ends[49] + span[0], ends[49] + span[1]) / rate(plain_ends, plain_ends[49] + span[0],
                                                                          plain_ends[49] + span[1])
        rows.append((k, load[1] - load[0], max(before) * 1e3, max(around) * 1e3, pause, ratio))
    print("| pair | inject took (s) | worst of 50 before (ms) | worst around the load (ms) | ratio | steps/s injected / plain |")
    print("| --- | --- | --- | --- | --- | --- |")
    for k, took, b, a, pause, ratio in rows:
        print(f"| {k} | {took:.2f} | {b:.1f} | {a:.1f} | {pause:.2f}x | {ratio:.4f} |")
    print(f"median pause {statistics.median(r[4] for r in rows):.2f}x, median throughput ratio "
          f"{statistics.median(r[5] for r in rows):.4f}")


if __name__ == "__main__":
    main()
