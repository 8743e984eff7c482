"""What the line sampler costs the loop thread, per sample, where a library drives the loop: the
loop's own CPU time for a fixed amount of Python work with the sampler on (--hz) against paused, in
blocks on-off-off-on in one process (the median of the blocks' differences), a process per tree and
round, for this tree and, with --before TREE, another one (a checkout of an
older commit, its C extension built) side by side (budget: the sampler <= 0.5% of step time at its
default 50 Hz; docs/DESIGN.md).

    python benchmarks/line_sampler_cost.py [--before /path/to/old/tree] [--hz 1000] [--depth 30] [--rounds 6]

The work runs inside a fake installed library (a site-packages folder put on sys.path), DEPTH frames
of the library's above the job's own line: the walk that names a library's line goes on to the
job's line (its context), so it is longest there. At 1000 Hz a sample's cost is 20x what the default
rate makes it; the table gives it per sample, and as a share of the loop's time at 50 Hz. CPU time
of the loop thread (time.thread_time), not wall time: a loaded machine's waits for a core are left
out."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LIBRARY = """
def run(depth, work):
    if depth:
        return run(depth - 1, work)
    return work()
"""

CHILD = r"""
import json, os, statistics, sys, time
sys.path.insert(0, sys.argv[1])  # the tree measured
sys.path.insert(0, sys.argv[2])  # the fake library's site-packages
hz, depth, seconds = float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
os.environ["TUIMON_SAMPLE_HZ"] = str(hz)
import tuimon
status = tuimon.instrument()
import fakelib
from tuimon.probe import state
s = state.probe.sampler

def work():
    n = 0
    for _ in range(20_000):
        n += 1
    return n

def block(on, chunks=40):
    s.pause(not on)
    t, w = time.thread_time(), time.monotonic()
    for _ in range(chunks):
        fakelib.run(depth, work)  # THE JOB'S LINE
    return (time.thread_time() - t) / chunks, time.monotonic() - w

block(True)
end = time.monotonic() + seconds
deltas, offs, on_wall, n0 = [], [], 0.0, s.samples
while time.monotonic() < end:  # on-off-off-on
    a, wa = block(True)
    b, _ = block(False)
    c, _ = block(False)
    d, wd = block(True)
    deltas.append((a + d - b - c) / 2)
    offs.append((b + c) / 2)
    on_wall += wa + wd
time.sleep(0.5)  # (the control thread counts the last samples)
rate = (s.samples - n0) / on_wall
print(json.dumps({"delta_us": statistics.median(deltas) * 1e6, "off_us": statistics.median(offs) * 1e6,
                  "rate": rate, "by_main": bool(s.by_main)}))
"""


def arm(tree: str, site: str, hz: float, depth: int, seconds: float) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUIMON_")}
    env["TUIMON_SHM_DIR"] = tempfile.mkdtemp()
    r = subprocess.run([sys.executable, "-c", CHILD, tree, site, str(hz), str(depth), str(seconds)], env=env,
                       capture_output=True, text=True, timeout=seconds + 120, cwd=tree)
    if r.returncode:
        raise SystemExit(f"{tree} hz={hz}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", help="another tree (its C extension built) to measure beside this one")
    ap.add_argument("--hz", type=float, default=1000)
    ap.add_argument("--depth", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=4)
    a = ap.parse_args()
    site = os.path.join(tempfile.mkdtemp(), "lib", "python3", "site-packages")
    os.makedirs(os.path.join(site, "fakelib"))
    with open(os.path.join(site, "fakelib", "__init__.py"), "w") as f:
        f.write(textwrap.dedent(LIBRARY))
    trees = {"this tree": ROOT, **({"before": os.path.abspath(a.before)} if a.before else {})}
    per_sample: dict[str, list[float]] = {name: [] for name in trees}
    share: dict[str, list[float]] = {name: [] for name in trees}
    for k in range(a.rounds):
        for name, tree in (trees.items() if k % 2 == 0 else reversed(list(trees.items()))):
            r = arm(tree, site, a.hz, a.depth, a.seconds)
            if not r["by_main"]:
                raise SystemExit(f"{name}: the native sampler did not run (no C extension?)")
            us = r["delta_us"] / (r["rate"] * r["off_us"] / 1e6)  # (extra CPU a chunk / samples a chunk)
            per_sample[name].append(us)
            share[name].append(us * 50 / 1e6)
            print(f"round {k + 1} {name}: {r['off_us']:.0f} us a chunk off, +{r['delta_us']:.2f} on, "
                  f"{r['rate']:.0f} samples/s: {us:.2f} us a sample", flush=True)
    print(f"\n{'tree':<12}{'us a sample (median)':>22}{'p25..p75':>18}{'at 50 Hz, % of the loop':>26}")
    for name in trees:
        xs = sorted(per_sample[name])
        q = statistics.quantiles(xs, n=4) if len(xs) >= 2 else [xs[0], xs[0], xs[0]]
        print(f"{name:<12}{statistics.median(xs):>22.2f}{f'{q[0]:.2f}..{q[2]:.2f}':>18}"
              f"{100 * statistics.median(share[name]):>25.3f}%")


if __name__ == "__main__":
    main()
