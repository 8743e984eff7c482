#!/usr/bin/env bash
# Issue 3 on a real GPU: sampler phases vs known workloads, sampler cost, doctor, the recording
# fixture of the demo workload, and the GPU-marked pytest tests.
# On the GPU machine, from the repo root: source .gpu/activate.sh; bash tests/gpu/check_sampling.sh
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TUIMON_SHM_DIR=$(mktemp -d)
echo "=== doctor"; python3 -m tuimon doctor
echo "=== sampler cost"; python3 benchmarks/sampler_cost.py --seconds 15 | tee "$OUT/sampler_cost.txt"
echo "=== recording of the demo workload (fixture)"
python3 -m tuimon run --headless -- python3 -m tuimon.workloads.demo_train --seconds 45 > "$OUT/demo.log" 2>&1 &
JOB=$!; sleep 6
python3 -m tuimon record $JOB -o "$OUT/h200_demo.jsonl" --seconds 35 --note "tuimon demo workload (CNN, bf16 autocast, 2 DataLoader workers, 30 ms/batch) on one H200"
wait $JOB
ls -la "$OUT/h200_demo.jsonl"; python3 - "$OUT/h200_demo.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
g = [l for l in lines[1:] if l["source"] == "gpu"]
print(len(lines), "lines;", "last gpu sample:", json.dumps(g[-1]["data"][0])[:600])
PY
echo "=== pytest gpu"; python3 -m pytest -q -p no:cacheprovider tests/gpu 2>&1 | tail -3
echo "=== phases"; python3 tests/gpu/check_sampling.py "$OUT"
