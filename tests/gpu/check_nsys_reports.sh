#!/usr/bin/env bash
# nsys reports of windows asked through the control block, once the job ends normally (nsys
# finishes its reports then): tuimon's summary beside `nsys stats`.
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TUIMON_SHM_DIR=$(mktemp -d) TUIMON_CAPTURE_DIR=/tmp/tuimon-captures2
python3 -m tuimon run --headless --nsys -- python3 -m tuimon.workloads.demo_train --seconds 45 > "$OUT/nsys_job2.log" 2>&1 &
JOB=$!; sleep 12
for i in 1 2; do timeout 60 python3 -m tuimon capture $JOB --steps 10 --wait --timeout 1 2>&1 | grep -E "asked|done|failed"; sleep 6; done
ls -la "$TUIMON_CAPTURE_DIR"
START=$(date +%s); wait $JOB; echo "job (nsys) exited $? after $(( $(date +%s) - START )) s more"
grep -vE "^\s*$" "$OUT/nsys_job2.log" | grep -iE "capture range|generat|report|error" | head -12
ls -la "$TUIMON_CAPTURE_DIR"
python3 - <<'PY'
import glob, os
from tuimon.capture import nsys as N
reps = sorted(glob.glob("/tmp/tuimon-captures2/*.nsys-rep"))
print("reports:", [(os.path.basename(r), os.path.getsize(r)) for r in reps])
tool = N.find_nsys()
for r in reps:
    s = N.stats(tool, r, top=5)
    print("==", os.path.basename(r), "(tuimon's summary)")
    for k in ("cuda_gpu_kern_sum", "nvtx_sum"):
        for row in s[k]:
            print(f"  {k:<18} {row['time_pct']:>6}% {row['instances']:>6}x {row['name'][:80]}")
        if s.get(k + "_error"): print("  error:", s[k + "_error"])
PY
for r in "$TUIMON_CAPTURE_DIR"/*.nsys-rep; do echo "== nsys stats nvtx_sum (direct) $(basename $r)"; nsys stats --report nvtx_sum --format csv "$r" 2>/dev/null | grep -E "PushPop" | head -5; done
