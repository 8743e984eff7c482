#!/usr/bin/env bash
# nsys windows through an interactive session (issue 10), for real: a steady GPU loop that logs
# every step's time itself runs under `tuimon run --headless --nsys`; three `tuimon capture --steps
# 20 --wait` windows while it runs; the worst step inside and after each window against the worst
# of the 15 s before the first; each report's size; tuimon's summary rows beside `nsys stats`
# rows of the same report; what is left once the job ends. Needs .libdw carried. Table last.
source tests/gpu/prelude.sh
W=tests/workloads/regressing.py
L=$(mktemp -d)
export TUIMON_CAPTURE_DIR=$L/captures
now() { python3 -c "import time; print(time.monotonic())"; }
python3 -m tuimon run --headless --nsys -- python3 $W --device cuda --seconds 110 --step-log "$L/steps.txt" \
  > "$L/job.log" 2>&1 &
JOB=$!
sleep 35
for i in 1 2 3; do
  echo "$(now)" > "$L/cap$i.t0"
  python3 -m tuimon capture $JOB --steps 20 --wait --timeout 120 2>&1 | python3 -c 'import sys, time
for line in sys.stdin: print(f"{time.monotonic():.4f} {line}", end="", flush=True)' > "$L/cap$i.stamped"
  rc=${PIPESTATUS[0]}
  cut -d" " -f2- "$L/cap$i.stamped" > "$L/cap$i.txt"
  echo "rc $rc" >> "$L/cap$i.txt"
  echo "$(now)" > "$L/cap$i.t1"
  sleep 8
done
wait $JOB; echo "job exited $?"
sleep 2
ps -eo pid,args | grep -i "[n]sys " | cut -c1-120 > "$L/left.txt"
nsys sessions list > "$L/sessions.txt" 2>&1
python3 - "$L" <<'PY' | tee "$OUT/table.txt"
import csv, glob, io, os, re, subprocess, sys
L = sys.argv[1]
steps = [tuple(map(float, l.split())) for l in open(f"{L}/steps.txt") if l.strip()]
t0 = [float(open(f"{L}/cap{i}.t0").read()) for i in (1, 2, 3)]
t1 = [float(open(f"{L}/cap{i}.t1").read()) for i in (1, 2, 3)]
before = [ms for t, ms in steps if t0[0] - 15 <= t < t0[0]]
worst_normal = max(before)
print("=== table")
print(f"steps logged {len(steps)}; the 15 s before the first window: {len(before)} steps, median "
      f"{sorted(before)[len(before) // 2]:.1f} ms, p99 {sorted(before)[int(0.99 * (len(before) - 1))]:.1f}, worst "
      f"{worst_normal:.1f} ms (the worst normal step)")
for i in range(3):
    inside = [ms for t, ms in steps if t0[i] <= t <= t1[i]]
    after = [ms for t, ms in steps if t1[i] < t <= t1[i] + 5]
    out = open(f"{L}/cap{i + 1}.txt").read()
    rep = next((l for l in out.splitlines() if l.endswith(".nsys-rep")), None)
    size = os.path.getsize(rep) if rep and os.path.exists(rep) else None
    print(f"window {i + 1}: `tuimon capture --steps 20 --wait` took {t1[i] - t0[i]:.1f} s ({out.splitlines()[-1]}); "
          f"worst step during it {max(inside):.1f} ms = {max(inside) / worst_normal:.2f}x the worst normal "
          f"({len(inside)} steps); in the 5 s after {max(after, default=float('nan')):.1f} ms; report {size} B")
    stamped = [(float(l.split(" ", 1)[0]), l.split(" ", 1)[1].strip()) for l in open(f"{L}/cap{i + 1}.stamped") if " " in l]
    at = {}
    for t, line in stamped:
        for state in ("capturing", "writing", "done", "failed"):
            if line.startswith(state + ":") and state not in at:
                at[state] = t
    if {"capturing", "writing", "done"} <= set(at):
        for name, a, b in (("nsys start", t0[i], at["capturing"]), ("collecting", at["capturing"], at["writing"]),
                           ("nsys stop", at["writing"], at["done"])):
            part = [ms for t, ms in steps if a <= t <= b]
            p99 = sorted(part)[int(0.99 * (len(part) - 1))] if part else float("nan")
            print(f"    {name:<11} {b - a:5.2f} s: {len(part):4} steps, worst {max(part, default=float('nan')):.1f} ms, "
                  f"p99 {p99:.1f}")
    print("    " + next((l for _, l in stamped if l.startswith("done:") or l.startswith("failed:")), "?")[:160])
    # tuimon's rows beside nsys stats' rows (top 5 of each table)
    for key, title in (("cuda_gpu_kern_sum", "top kernels:"), ("nvtx_sum", "NVTX ranges:"), ("cuda_api_sum", "top CUDA API calls:")):
        lines = out.splitlines()
        k = lines.index(title) if title in lines else None
        mine = [re.split(r"\s{2,}", l.strip(), maxsplit=2) for l in lines[k + 1:k + 6]] if k is not None else []
        mine = [(m[0].rstrip("%"), m[2]) for m in mine if len(m) == 3 and m[0].endswith("%")]
        p = subprocess.run(["nsys", "stats", "--report", key, "--format", "csv", "--output", "-", "--force-export=true", rep or "none"],
                           capture_output=True, text=True)
        lines_out = p.stdout.splitlines()
        k0 = next((j for j, l in enumerate(lines_out) if "Time (%)" in l), None)
        rows = list(csv.DictReader(io.StringIO("\n".join(lines_out[k0:])))) if k0 is not None else []
        if not rows:
            print(f"    nsys stats {key}: rc {p.returncode}: {(p.stderr or p.stdout).strip()[-200:]!r}")
        theirs = [(r.get("Time (%)"), r.get("Name") or r.get("Range")) for r in rows][:len(mine)]
        same = [(a == b[0] and n[:60] == (b[1] or "")[:60]) for (a, n), b in zip(mine, theirs)]
        print(f"    {key}: {sum(same)}/{len(mine)} rows equal to nsys stats' (first: tuimon {mine[:1]} | nsys {theirs[:1]})")
print("nsys processes left after the job:", open(f"{L}/left.txt").read().strip() or "none")
print("nsys sessions list:", open(f"{L}/sessions.txt").read().strip().splitlines()[-1:])
print("job log tail:", open(f"{L}/job.log").read()[-300:])
PY
