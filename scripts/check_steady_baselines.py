"""Steady loops against their baselines for minutes (CPU): no regression should be said.

    python scripts/check_steady_baselines.py [--minutes 5] [--out DIR]

Four real loops (tests/workloads/regressing.py under `tuimon run`, torch and DataLoader workers)
start together: a steady loop and its twin, a steady bursty input-bound loop (4 workers, most steps
find a batch ready) and its twin. A baseline is saved from the first of each pair; the twins are
watched with `tuimon attach --plain --baseline` for --minutes. A REGRESSION line is false when the
twin's own timer (its mean step over the 20 s before the line) is under 1.05x the baseline loop's
mean while its baseline was saved. Prints a table last.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOOP = os.path.join(ROOT, "tests", "workloads", "regressing.py")
KINDS = {"steady": (), "bursty": ("--workers", 4, "--batch-ms", 320, "--backward-ms", 2, "--other-ms", 2)}
SAVE_S = 24


def tuimon(*args):
    return [sys.executable, "-m", "tuimon", *map(str, args)]


def job(seconds, log, extra):
    p = subprocess.Popen(tuimon("run", "--headless", "--", sys.executable, LOOP, "--seconds", seconds, "--step-log", log,
                                *map(str, extra)), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert p.stdout.readline().strip() == "training"
    return p


def read_lines(proc, into):
    for line in proc.stdout:
        into.append((time.monotonic(), line.rstrip("\n")))


def steps(log):
    return [tuple(map(float, row.split())) for row in open(log) if row.strip()]


def mean_between(rows, a, b):
    ms = [m for t, m in rows if a <= t <= b]
    return statistics.mean(ms) if ms else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=5)
    ap.add_argument("--out", default=tempfile.mkdtemp(prefix="steady-baselines-"))
    a = ap.parse_args()
    os.environ.setdefault("TUIMON_SHM_DIR", tempfile.mkdtemp(prefix="tuimon-shm-"))
    watch_s = a.minutes * 60
    run_s = SAVE_S + watch_s + 40
    logs = {(k, w): os.path.join(a.out, f"{k}-{w}.steps") for k in KINDS for w in ("base", "twin")}
    procs = []
    try:
        jobs = {(k, w): job(run_s, logs[k, w], KINDS[k]) for k in KINDS for w in ("base", "twin")}
        procs += jobs.values()
        saving_from = time.monotonic()
        saves = {k: subprocess.Popen(tuimon("baseline", "save", jobs[k, "base"].pid, "--seconds", SAVE_S, "-o",
                                            os.path.join(a.out, f"{k}.json")), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True) for k in KINDS}
        for k, p in saves.items():
            out, err = p.communicate(timeout=SAVE_S + 60)
            print(f"=== baseline of the {k} loop (exit {p.returncode})\n{out}{err}", flush=True)
        saved_at = time.monotonic()
        lines = {k: [] for k in KINDS}
        for k in KINDS:
            m = subprocess.Popen(tuimon("attach", jobs[k, "twin"].pid, "--plain", "--baseline",
                                        os.path.join(a.out, f"{k}.json")), stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
            procs.append(m)
            threading.Thread(target=read_lines, args=(m, lines[k]), daemon=True).start()
        start = time.monotonic()
        while time.monotonic() < start + watch_s:
            time.sleep(30)
            print(f"{time.monotonic() - start:.0f} s: " + "; ".join(
                f"{k}: {sum('REGRESSION' in x for _, x in v)} regression of {len(v)} lines" for k, v in lines.items()),
                flush=True)
        rows = []
        for k in KINDS:
            base, twin = steps(logs[k, "base"]), steps(logs[k, "twin"])
            ref = mean_between(base, saving_from, saved_at)
            said = lines[k]
            regs = [(t, x) for t, x in said if "REGRESSION" in x]
            false = [x for t, x in regs if not mean_between(twin, t - 20, t) >= 1.05 * ref]
            pct = [int(m.group(1)) for _, x in said if (m := re.search(r"mean step [\d.]+ m?s vs [\d.]+ \(([+-]\d+)%", x))]
            own = [mean_between(twin, t - 10, t) / ref for t, _ in said]
            rows.append((k, len(said), sum("as baseline" in x for _, x in said), sum("collecting" in x for _, x in said),
                         len(regs), len(false), f"{min(pct):+d}%..{max(pct):+d}%" if pct else "-",
                         f"{min(own):.3f}..{max(own):.3f}" if own else "-",
                         f"{ref:.1f} / {mean_between(twin, start, time.monotonic()):.1f}"))
        print(f"\n=== table: twins watched {watch_s:.0f} s against the baseline of their first loop ({a.out})")
        head = ("loop", "lines", "as baseline", "collecting", "REGRESSION", "false", "said change", "own 10 s ratio",
                "own mean ms base / twin")
        print(" | ".join(head))
        for r in rows:
            print(" | ".join(map(str, r)))
    finally:
        for p in procs:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
