#!/usr/bin/env bash
# Issue 10 groundwork: what nsys's interactive sessions do on this machine, before tuimon drives
# them. A steady GPU loop (its every step logged by itself) under `nsys launch --session-new`;
# three windows of `nsys start` / 2 s / `nsys stop` while it runs; each report's size and `nsys
# stats` read while the job runs; the worst step inside and after each window vs the steps before;
# `nsys shutdown` and what is left behind (processes, /tmp files). Then the options each command
# takes (for splitting --nsys-args). Needs .libdw carried. Prints a table last.
source tests/gpu/prelude.sh
W=tests/workloads/regressing.py
nsys --version
S=tuimon-explore-$$
L=$(mktemp -d)  # (everything but the table stays on the machine)
ls /tmp > "$L/tmp_before.txt"
T0=$(python3 -c "import time; print(time.monotonic())")
nsys launch --session-new=$S --trace=cuda,nvtx,osrt python3 $W --device cuda --seconds 70 --step-log "$L/steps.txt" \
  > "$L/job.log" 2>&1 &
LAUNCH=$!
sleep 15
nsys sessions list 2>&1 | tee "$L/sessions.txt"
for i in 1 2 3; do
  python3 - "$S" "$L/w$i" "$i" <<'PY' | tee -a "$L/windows.txt"
import subprocess, sys, time, os
s, out, i = sys.argv[1:4]
t0 = time.monotonic()
p = subprocess.run(["nsys", "start", f"--session={s}", "-o", out, "--force-overwrite=true"], capture_output=True, text=True)
t1 = time.monotonic()
time.sleep(2)
t2 = time.monotonic()
q = subprocess.run(["nsys", "stop", f"--session={s}"], capture_output=True, text=True)
t3 = time.monotonic()
rep = out + ".nsys-rep"
size = os.path.getsize(rep) if os.path.exists(rep) else None
st = subprocess.run(["nsys", "stats", "--report", "cuda_gpu_kern_sum", "--format", "csv", rep], capture_output=True, text=True)
t4 = time.monotonic()
print(f"window {i} start {t0:.3f} rc {p.returncode} took {t1 - t0:.2f} s | stop at {t2:.3f} rc {q.returncode} took "
      f"{t3 - t2:.2f} s | report {size} B | stats rc {st.returncode} {t4 - t3:.2f} s, {len(st.stdout.splitlines())} lines | "
      f"start said: {(p.stdout + p.stderr).strip()[:200]!r} | stop said: {(q.stdout + q.stderr).strip()[:200]!r}", flush=True)
PY
  sleep 5
done
ps -eo pid,args | grep -i [n]sys | cut -c1-150 > "$L/nsys_procs_running.txt"
wait $LAUNCH; echo "launch exited $?"
ps -eo pid,args | grep -i [n]sys | cut -c1-150 > "$L/nsys_procs_after_job.txt"
nsys sessions list 2>&1 | tail -3
nsys shutdown --session=$S 2>&1 | tail -2; echo "shutdown rc $?"
sleep 2
ps -eo pid,args | grep -i [n]sys | cut -c1-150 > "$L/nsys_procs_after_shutdown.txt"
ls /tmp > "$L/tmp_after.txt"
for c in launch start stop shutdown; do nsys $c --help 2>&1 | grep -oE "^\s+(-[a-zA-Z], )?--[a-z-]+" | tr -d ' ' | tr '\n' ' ' > "$L/help_$c.txt"; done
python3 - "$L" <<'PY' | tee "$OUT/table.txt"
import sys, re, os
out = sys.argv[1]
steps = [tuple(map(float, l.split())) for l in open(f"{out}/steps.txt") if l.strip()]
wins = [tuple(float(x) for x in re.findall(r"(?:start|stop at) (\d+\.\d+)", l)[:2]) for l in open(f"{out}/windows.txt")]
print("\n=== table")
print("job log tail:", open(f"{out}/job.log").read()[-700:])
print(f"{len(steps)} steps logged, from {steps[0][0] if steps else None} to {steps[-1][0] if steps else None}")
first = wins[0][0]
before = [ms for t, ms in steps if t < first and t > first - 10]
print(f"steps before the first window (10 s): {len(before)}, worst {max(before, default=float('nan')):.1f} ms, "
      f"median {sorted(before)[len(before)//2] if before else float('nan'):.1f}")
for i, (a, b) in enumerate(wins, 1):
    inside = [ms for t, ms in steps if a <= t <= b + 5]   # start .. stop returned + 5 s
    after = [ms for t, ms in steps if b + 5 < t <= b + 10]
    print(f"window {i}: worst step from start to 5 s after stop {max(inside, default=float('nan')):.1f} ms ({len(inside)} steps), "
          f"worst in the 5 s after {max(after) if after else float('nan'):.1f} ms")
for l in open(f"{out}/windows.txt"): print(l.strip()[:400])
print("nsys processes while the job ran:", open(f"{out}/nsys_procs_running.txt").read().strip()[:600])
print("after the job exited:", open(f"{out}/nsys_procs_after_job.txt").read().strip()[:400])
print("after shutdown:", open(f"{out}/nsys_procs_after_shutdown.txt").read().strip()[:400])
new = set(open(f"{out}/tmp_after.txt").read().split()) - set(open(f"{out}/tmp_before.txt").read().split())
print("new in /tmp:", sorted(new)[:20])
for c in ("launch", "start", "stop", "shutdown"):
    print(f"{c} options:", open(f"{out}/help_{c}.txt").read()[:1500])
PY
