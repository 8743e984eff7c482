"""The monitor's budget, measured on the real program in a pseudo-terminal (120x40 by default):
CPU % of one core and bytes written to the terminal per second over a steady-state window, time
to the first frame, peak RSS, and whether torch ever got loaded into the monitor process.

    python benchmarks/ui_budget.py [--seconds 30] [--warmup 3] \
        --run "tuimon=python -m tuimon replay tests/fixtures/h200_demo.jsonl" \
        --run "nvitop=python -m nvitop"

Each --run is NAME=COMMAND; they run one after the other under the same conditions, and the table
prints last. Budgets (issue 4): CPU <= 3% at a 1 s interval, <= 5 KB/s, first frame <= 1.0 s,
RSS <= 100 MB, no torch.
"""

import argparse
import fcntl
import os
import select
import shlex
import struct
import subprocess
import sys
import termios
import time

import psutil


def measure(cmd: list[str], seconds: float, warmup: float, cols: int, rows: int) -> dict:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(cols), LINES=str(rows))
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    proc = psutil.Process(p.pid)
    total = 0
    first_frame = None
    steady_bytes = 0
    cpu_start = None
    rss_peak = 0
    torch = False
    t_steady = t0 + warmup
    end = t_steady + seconds
    next_look = t0  # RSS and loaded libraries, once a second: reading smaps is not free for the monitor
    while time.monotonic() < end and p.poll() is None:
        r, _, _ = select.select([master], [], [], 0.05)
        now = time.monotonic()
        if r:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            total += len(data)
            if first_frame is None and total >= cols * 4:  # a screenful has started to arrive
                first_frame = now - t0
            if now >= t_steady:
                steady_bytes += len(data)
        if cpu_start is None and now >= t_steady:
            cpu_start = _cpu(proc)
        if now < next_look:
            continue
        next_look = now + 1.0
        try:
            rss_peak = max(rss_peak, sum(x.memory_info().rss for x in [proc, *proc.children(recursive=True)]))
            if not torch:
                torch = any("libtorch" in (m.path or "") for m in proc.memory_maps())
        except psutil.Error:
            pass
    cpu = (_cpu(proc) - cpu_start) / seconds * 100 if cpu_start is not None else None
    exited = p.poll()
    try:
        os.killpg(p.pid, 15)
        p.wait(5)
    except ProcessLookupError:
        pass  # (it had ended by itself: exited_early says so)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
    os.close(master)
    return {"cpu_pct": cpu, "bytes_per_s": steady_bytes / seconds, "first_frame_s": first_frame,
            "rss_mb": rss_peak / 1e6, "torch": torch, "exited_early": exited is not None}


def _cpu(proc: psutil.Process) -> float:
    total = 0.0
    for x in [proc, *proc.children(recursive=True)]:
        try:
            t = x.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", action="append", required=True, help="NAME=COMMAND")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--warmup", type=float, default=3)
    ap.add_argument("--size", default="120x40")
    a = ap.parse_args()
    cols, rows = map(int, a.size.split("x"))
    results = []
    for spec in a.run:
        name, _, command = spec.partition("=")
        print(f"measuring {name}: {command}", file=sys.stderr, flush=True)
        results.append((name, measure(shlex.split(command), a.seconds, a.warmup, cols, rows)))
    print(f"{a.size}, {a.seconds:g} s steady state after {a.warmup:g} s")
    print(f"{'program':<22}{'CPU %':>8}{'KB/s':>9}{'first frame s':>15}{'RSS MB':>9}{'torch':>7}")
    for name, r in results:
        cpu = f"{r['cpu_pct']:.2f}" if r["cpu_pct"] is not None else "n/a"
        ff = f"{r['first_frame_s']:.2f}" if r["first_frame_s"] is not None else "n/a"
        note = "  (exited early)" if r["exited_early"] else ""
        print(f"{name:<22}{cpu:>8}{r['bytes_per_s'] / 1000:>9.2f}{ff:>15}{r['rss_mb']:>9.1f}{str(r['torch']):>7}{note}")


if __name__ == "__main__":
    main()
