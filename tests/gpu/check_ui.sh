#!/usr/bin/env bash
# Issue 4 on a real GPU: the monitor's budget against live NVML with nvitop measured beside it
# in the same run, and a screenshot of the live main screen. Needs nvitop (carried as a wheel).
# On the GPU machine, from the repo root: source .gpu/activate.sh; bash tests/gpu/check_ui.sh
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TUIMON_SHM_DIR=$(mktemp -d)
python3 -m nvitop --help | grep -E -- "--interval|-i " | head -2
python3 -m tuimon run --headless -- python3 -m tuimon.workloads.demo_train --seconds 150 > "$OUT/demo.log" 2>&1 &
JOB=$!; sleep 8
echo "=== live screenshot"
python3 tests/gpu/live_screenshot.py $JOB 12 "$OUT/live-h200-120x40.svg"
echo "=== budget"
python3 benchmarks/ui_budget.py --seconds 30 --warmup 3 \
  --run "tuimon attach (live)=python3 -m tuimon attach $JOB --interval 1" \
  --run "nvitop=python3 -m nvitop --interval 1" \
  --run "tuimon replay=python3 -m tuimon replay tests/fixtures/h200_demo.jsonl" 2>&1 | tee "$OUT/ui_budget.txt"
kill $JOB 2>/dev/null; wait $JOB 2>/dev/null
