"""The steady-state CPU of `tuimon attach PID` by thread, for builds side by side: each build started
in turn in a pty (monitor_cost.Term, 120x40), `rounds` times, alternating; after `warmup` seconds its
threads' CPU time (/proc/PID/task/TID/schedstat: ns on a CPU, exact) over `seconds`.

    python benchmarks/attach_threads.py PID DIR [DIR ...] [--rounds 3] [--seconds 30] [--warmup 10] [--cpu 1]

Each DIR is a checkout (its own tuimon, its C extension built in place), run as
`cd DIR && python -m tuimon attach PID`; --cpu pins the monitors (pin the job elsewhere). Prints
ms of CPU per second: the main thread (Textual, the panels), the sampler (the busiest other thread:
the session's polls) and the rest, and the bytes a second written to the terminal, per run and as
medians."""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from monitor_cost import Term, pump  # noqa: E402


def thread_ns(pid: int) -> dict[int, int]:
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return out


def one(build: str, pid: int, args) -> tuple[float, float, float, float]:
    cmd = f"cd {shlex.quote(build)} && exec taskset -c {args.cpu} {shlex.quote(sys.executable)} -m tuimon attach {pid}"
    t = Term(os.path.basename(build), ["sh", "-c", cmd], 120, 40, emulate=False)
    try:
        pump([t], time.monotonic() + args.warmup)
        before, t0, b0 = thread_ns(t.p.pid), time.monotonic(), t.bytes
        pump([t], t0 + args.seconds)
        after, span, written = thread_ns(t.p.pid), time.monotonic() - t0, t.bytes - b0
    finally:
        t.stop()
    used = {tid: (ns - before.get(tid, 0)) / 1e6 / span for tid, ns in after.items()}
    main = used.pop(t.p.pid, 0.0)
    sampler = max(used.values(), default=0.0)
    return main, sampler, sum(used.values()) - sampler, written / span


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("pid", type=int)
    p.add_argument("builds", nargs="+")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--warmup", type=float, default=10)
    p.add_argument("--cpu", type=int, default=1)
    args = p.parse_args()
    got: dict[str, list[tuple[float, float, float, float]]] = {b: [] for b in args.builds}
    for r in range(args.rounds):
        for b in args.builds:
            got[b].append(one(b, args.pid, args))
            m, s, rest, bps = got[b][-1]
            print(f"round {r + 1} {b}: main {m:.2f} sampler {s:.2f} rest {rest:.2f} total {m + s + rest:.2f} ms/s, "
                  f"{bps:.0f} B/s to the terminal", flush=True)
    for b, runs in got.items():
        med = [statistics.median(x[i] for x in runs) for i in range(3)]
        print(f"median {b}: main {med[0]:.2f} sampler {med[1]:.2f} rest {med[2]:.2f} "
              f"total {statistics.median(sum(x[:3]) for x in runs):.2f} ms/s, "
              f"{statistics.median(x[3] for x in runs):.0f} B/s")


if __name__ == "__main__":
    main()
