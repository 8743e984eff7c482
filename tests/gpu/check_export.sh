#!/usr/bin/env bash
# The Prometheus exporter beside a real GPU job: the GPU and job series it serves (plausible
# next to nvidia-smi), and what serving costs (CPU of `tuimon export` at 1 Hz, the job's steps/s
# with and without it). On the GPU machine: source .gpu/activate.sh; bash tests/gpu/check_export.sh
source tests/gpu/prelude.sh
python3 -m tuimon run --headless -- python3 -m tuimon.workloads.demo_train --seconds 200 > "$OUT/demo.log" 2>&1 &
JOB=$!; sleep 15
steps() { python3 -m tuimon attach $JOB --once --json --window 10 | python3 -c "import json,sys; print(json.load(sys.stdin)['steps_per_s'])"; }
BEFORE=$(steps)
python3 -m tuimon export $JOB --port 9464 2> "$OUT/export.err" &
EXP=$!; sleep 6
python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9464/metrics').read().decode())" > "$OUT/metrics.txt"
echo "=== GPU and job series"
grep -E '^tuimon_(gpu_(sm_active|tensor_active|dram_active|power|memory_used|sm_clock)|step_time|steps_per|data_wait|phase|verdict|gpu_idle|torch_reserved)' "$OUT/metrics.txt" | grep -v ' 0.0$' | head -40
nvidia-smi --query-gpu=power.draw,memory.used,clocks.sm --format=csv,noheader
echo "=== cost of serving, 30 s at 1 Hz"
python3 - $EXP <<'PY'
import sys, time, psutil
p = psutil.Process(int(sys.argv[1])); a = p.cpu_times(); t = time.monotonic(); time.sleep(30)
b = p.cpu_times(); print(f"tuimon export CPU: {100 * (b.user + b.system - a.user - a.system) / (time.monotonic() - t):.2f}% of a core, RSS {p.memory_info().rss / 1e6:.1f} MB")
PY
AFTER=$(steps)
echo "job steps/s before export: $BEFORE  with export serving: $AFTER"
kill $EXP $JOB 2>/dev/null; wait 2>/dev/null
cat "$OUT/export.err"
