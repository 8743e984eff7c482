#!/usr/bin/env bash
# Issue 10: nsys killed mid-window, for real. A GPU loop logging every step under `tuimon run
# --headless --nsys`; a 400-step window; 1.5 s into its collection the session's nsys agent
# (`nsys --start-agent`) is SIGKILLed. What `tuimon capture` says, whether the job goes on (its
# steps after the kill), a second window asked for afterwards, the job's exit. Needs .libdw. Table last.
source tests/gpu/prelude.sh
W=tests/workloads/regressing.py
L=$(mktemp -d); export TUIMON_CAPTURE_DIR=$L/captures
stamp() { python3 -c 'import sys, time
for line in sys.stdin: print(f"{time.monotonic():.4f} {line.strip()}", flush=True)'; }
python3 -m tuimon run --headless --nsys -- python3 $W --device cuda --seconds 45 --step-log "$L/steps.txt" > "$L/job.log" 2>&1 &
JOB=$!
sleep 20
python3 -m tuimon capture $JOB --steps 400 --wait --timeout 60 2>&1 | stamp > "$L/cap1.txt" &
CAP=$!
for _ in $(seq 100); do grep -q "capturing:" "$L/cap1.txt" 2>/dev/null && break; sleep 0.1; done
sleep 1.5
AGENT=$(pgrep -f "nsys --start-agent" | head -1)
python3 -c "import time; print(f'{time.monotonic():.4f}')" > "$L/kill.t"
kill -9 $AGENT; echo "killed agent $AGENT: $?" > "$L/kill.txt"
wait $CAP; echo "capture rc $?" >> "$L/kill.txt"
sleep 3
python3 -m tuimon capture $JOB --steps 20 --wait --timeout 60 > "$L/cap2.txt" 2>&1; echo "rc $?" >> "$L/cap2.txt"
wait $JOB; echo "job exit $?" >> "$L/kill.txt"
sleep 1
ps -eo pid,args | grep -i "[n]sys " | cut -c1-120 > "$L/left.txt"
python3 - "$L" <<'PY' | tee "$OUT/killed_table.txt"
import os, sys
L = sys.argv[1]
read = lambda n: open(os.path.join(L, n)).read() if os.path.exists(os.path.join(L, n)) else ""
steps = [tuple(map(float, l.split())) for l in read("steps.txt").splitlines() if l.strip()]
k = float(read("kill.t") or 0)
before = [ms for t, ms in steps if k - 10 <= t < k]
after = [ms for t, ms in steps if t >= k]
print("=== table")
print("kill:", read("kill.txt").replace("\n", " | "))
print("first window, as tuimon capture said it:")
for line in read("cap1.txt").splitlines():
    if any(w in line for w in ("asked", "capturing:", "writing:", "failed", "done:", "tuimon:")):
        print("   ", line.split(" ", 1)[1][:220] if " " in line else line)
print(f"job steps: {len(before)} in the 10 s before the kill (median {sorted(before)[len(before)//2] if before else 0:.1f} ms), "
      f"{len(after)} after it (median {sorted(after)[len(after)//2] if after else 0:.1f} ms, worst {max(after, default=0):.1f} ms, "
      f"last at +{(steps[-1][0] - k) if steps else 0:.1f} s)")
print("second window:", " | ".join(read("cap2.txt").splitlines()[:3] + read("cap2.txt").splitlines()[-2:])[:500])
print("job log tail:", read("job.log")[-300:].replace("\n", " | "))
print("nsys left:", read("left.txt").strip() or "none")
PY
