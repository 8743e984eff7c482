#!/usr/bin/env bash
# Issue 5 on a real GPU: two nsys windows (since issue 10: nsys start/stop in the job's session, run by
# `tuimon capture`) of a job under `tuimon run --nsys`, their reports and `nsys stats` beside tuimon's summary; a torch.profiler
# window on CUDA whose trace loads as JSON; the step-time cost of windows in both modes.
# On the GPU machine, from the repo root: source .gpu/activate.sh; bash tests/gpu/check_capture.sh
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TUIMON_SHM_DIR=$(mktemp -d) TUIMON_CAPTURE_DIR=/tmp/tuimon-captures
command -v nsys || { echo "skipped: no nsys"; exit 0; }

echo "=== nsys: two windows in the job's session"
python3 -m tuimon run --headless --nsys -- python3 -m tuimon.workloads.demo_train --seconds 240 > "$OUT/nsys_job.log" 2>&1 &
JOB=$!; sleep 15
for i in 1 2; do
  timeout 200 python3 -m tuimon capture $JOB --steps 10 --wait --timeout 180 2>&1 | tee "$OUT/nsys_capture_$i.txt"
done
ls -la "$TUIMON_CAPTURE_DIR"
for r in "$TUIMON_CAPTURE_DIR"/*.nsys-rep; do
  echo "--- nsys stats (direct) of $(basename "$r")"
  nsys stats --report nvtx_sum --format csv "$r" 2>/dev/null | grep -E "^Time|PushPop" | head -6
  nsys stats --report cuda_gpu_kern_sum --format csv "$r" 2>/dev/null | grep -vE "^(Generating|Processing|$)" | head -4 | cut -c1-160
done
kill -INT $JOB 2>/dev/null; sleep 5; kill $JOB 2>/dev/null; wait $JOB 2>/dev/null
tail -5 "$OUT/nsys_job.log"

echo "=== torch.profiler window on CUDA"
python3 -m tuimon run --headless -- python3 -m tuimon.workloads.demo_train --seconds 120 > "$OUT/torch_job.log" 2>&1 &
JOB=$!; sleep 12
timeout 120 python3 -m tuimon capture $JOB --steps 10 --wait 2>&1 | tee "$OUT/torch_capture.txt"
TRACE=$(grep -E "\.pt\.trace\.json\.gz$" "$OUT/torch_capture.txt" | tail -1)
python3 - "$TRACE" <<'PY'
import gzip, json, sys
ev = json.load(gzip.open(sys.argv[1]))["traceEvents"]
print("trace loads as JSON:", len(ev), "events,", sum(1 for e in ev if e.get("cat") == "kernel"), "kernel events")
PY
kill $JOB; wait $JOB 2>/dev/null

echo "=== capture cost, torch.profiler"
python3 benchmarks/capture_cost.py --steps 20 | tee "$OUT/cost_torch.txt"
echo "=== capture cost, nsys"
python3 benchmarks/capture_cost.py --steps 20 --nsys | tee "$OUT/cost_nsys.txt"
echo "=== pytest capture tests"
python3 -m pytest -q -p no:cacheprovider tests/test_capture.py 2>&1 | tail -2
