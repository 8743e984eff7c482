"""The table of tests/gpu/explore_nsys_stop_cost.sh, from its log folder."""

import json
import os
import re
import sqlite3
import sys
from collections import defaultdict

L = sys.argv[1]


def read(name, default=""):
    try:
        return open(os.path.join(L, name)).read()
    except OSError:
        return default


def pct(xs, q):
    xs = sorted(xs)
    return xs[int(q * (len(xs) - 1))] if xs else float("nan")


def stamped(name):
    rows = []
    for line in read(name).splitlines():
        t, _, rest = line.partition(" ")
        try:
            rows.append((float(t), rest.strip()))
        except ValueError:
            pass
    return rows


def first(rows, state):
    return next((t for t, line in rows if line.startswith(state + ":")), None)


steps = [tuple(map(float, line.split())) for line in read("steps.txt").splitlines() if line.strip()]
cpu = [json.loads(line) for line in read("cpu.jsonl").splitlines() if line.strip()]


def in_(a, b):
    return [ms for t, ms in steps if a <= t <= b]


def cpu_in(a, b):
    """Mean CPU (cores) per process and per job thread over [a, b]."""
    samples = [s for s in cpu if a <= s["t"] <= b]
    procs, threads = defaultdict(float), defaultdict(float)
    for s in samples:
        for pid, _ppid, name, nice, share in s["procs"]:
            procs[(name, pid, nice)] += share
        for _tid, name, _nice, share in s["job_threads"]:
            threads[name] += share
    n = max(1, len(samples))
    top = sorted(((v / n, k) for k, v in procs.items()), reverse=True)[:6]
    thr = sorted(((v / n, k) for k, v in threads.items()), reverse=True)[:5]
    return (", ".join(f"{name}[{pid}] ni{nice} {v:.2f}" for v, (name, pid, nice) in top),
            ", ".join(f"{name} {v:.2f}" for v, name in thr))


print("=== table")
t0 = [float(read(f"cap{i}.t0") or "nan") for i in range(1, 7)]
t1 = [float(read(f"cap{i}.t1") or "nan") for i in range(1, 7)]
before = in_(t0[0] - 15, t0[0])
worst_normal = max(before) if before else float("nan")
print(f"job 1: {len(steps)} steps logged; the 15 s before window 1: {len(before)} steps, median {pct(before, .5):.1f} ms, "
      f"p99 {pct(before, .99):.1f}, worst {worst_normal:.1f} ms (the worst normal step)")
procs, threads = cpu_in(t0[0] - 15, t0[0])
print(f"  CPU before (cores): {procs}\n  job threads: {threads}")
print(f"{'window':<8}{'nsys procs':<12}{'start s':>8}{'worst':>7}{'collect s':>10}{'worst':>7}{'stop s':>7}{'worst':>7}"
      f"{'p99':>6}{'5 s after':>10}{'worst/normal':>13}")
for i in range(6):
    rows = stamped(f"cap{i + 1}.stamped")
    cap, wri, done = first(rows, "capturing"), first(rows, "writing"), first(rows, "done")
    if None in (cap, wri, done):
        print(f"window {i + 1}: {[line for _, line in rows][-3:]}")
        continue
    s1, s2, s3 = in_(t0[i], cap), in_(cap, wri), in_(wri, done)
    after = in_(done, done + 5)
    worst = max(s1 + s2 + s3 + after)
    print(f"{i + 1:<8}{'idle' if i + 1 >= int(os.environ.get('IDLE_FROM', 4)) else 'as is':<12}{cap - t0[i]:>8.2f}{max(s1, default=0):>7.1f}{wri - cap:>10.2f}"
          f"{max(s2, default=0):>7.1f}{done - wri:>7.2f}{max(s3, default=0):>7.1f}{pct(s3, .99):>6.1f}"
          f"{max(after, default=0):>10.1f}{worst / worst_normal:>12.2f}x")
    procs, threads = cpu_in(wri, done)
    print(f"    during stop, CPU (cores): {procs}\n    job threads: {threads}")
    spikes = [(round(t - wri, 2), ms) for t, ms in steps if wri - 0.2 <= t <= done and ms > 1.3 * pct(before, .5)]
    print(f"    steps > 1.3x the median while stopping (s after `nsys stop`, ms): {spikes[:8]}")
    rep = next((line for _, line in rows if line.endswith(".nsys-rep")), None)
    print(f"    report {rep and os.path.basename(rep)} {os.path.getsize(rep) if rep and os.path.exists(rep) else None} B")
print("nsys processes while job 1 ran (ps: pid ppid ni cls pcpu args):")
print("  " + read("nsys_procs.txt").replace("\n", "\n  "))

if not os.path.exists(os.path.join(L, "capA.txt")):
    sys.exit(0)
print("=== two jobs under nsys at once (B with --gpu-metrics-devices=all)")
print("sessions while both ran:", " | ".join(read("sessions_during.txt").split("\n")[:4]))
for c in "AB":
    rows = stamped(f"cap{c}.txt")
    said = [line for _, line in rows if re.match(r"(capturing|writing|done|failed):", line)]
    rep = read(f"rep{c}.txt").strip()
    print(f"job {c}: {' / '.join(s[:90] for s in said)}; report {os.path.basename(rep) or None} "
          f"{os.path.getsize(rep) if rep and os.path.exists(rep) else None} B")
print("a second `tuimon capture` of B while B's report was written:", " | ".join(read("capB_second.txt").split("\n")[:3]))
try:
    db = sqlite3.connect(os.path.join(L, "repB.sqlite"))
    tables = {r[0] for r in db.execute("select name from sqlite_master where type='table'")}
    gm = [t for t in tables if "GPU_METRICS" in t.upper()]
    print("GPU metrics tables in B's report:", gm)
    if "GPU_METRICS" in tables:
        n, k, lo, hi = db.execute("select count(*), count(distinct timestamp), min(timestamp), max(timestamp) "
                                  "from GPU_METRICS").fetchone()
        print(f"  GPU_METRICS: {n} rows, {k} timestamps over {(hi - lo) / 1e9 if hi else 0:.2f} s")
        names = db.execute("select metricName from TARGET_INFO_GPU_METRICS limit 40").fetchall() \
            if "TARGET_INFO_GPU_METRICS" in tables else []
        print("  metrics:", ", ".join(r[0] for r in names)[:600])
    kern = db.execute("select count(*), min(start), max(end) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone() \
        if "CUPTI_ACTIVITY_KIND_KERNEL" in tables else None
    print("  kernels in B's report:", kern and f"{kern[0]} over {(kern[2] - kern[1]) / 1e9:.2f} s")
except Exception as e:  # noqa: BLE001 - a table, not a test
    print("B's report as sqlite:", type(e).__name__, e)
capB = stamped("capB.txt")
cb, wb = first(capB, "capturing"), first(capB, "writing")
att = stamped("attachB.txt")
for name, keep in (("before", lambda t: cb and t < cb), ("during", lambda t: cb and wb and cb <= t <= wb + 1),
                   ("after", lambda t: wb and t > wb + 1)):
    rows = [line for t, line in att if keep(t)]
    sm = [int(m.group(1)) for line in rows if (m := re.search(r"SM (\d+)%", line))]
    probs = [line[:140] for line in rows if "tuimon:" in line or "error" in line.lower()]
    print(f"tuimon's GPM on B's GPU {name} B's window: SM% {sm[:10]}; problems {probs[:2]}")
print("left after both jobs: nsys processes:", read("left.txt").strip() or "none", "| sessions:",
      read("sessions_after.txt").strip()[:120], "| /tmp nsys entries:", read("tmp_left.txt").split() or "none")
