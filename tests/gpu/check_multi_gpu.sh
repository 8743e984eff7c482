#!/usr/bin/env bash
# Two GPUs: a job on the second one only (CUDA_VISIBLE_DEVICES=1). The recording must mark GPU 1
# as the target's, list the job's PID among GPU 1's processes and not GPU 0's, and show GPU 1
# busy and GPU 0 idle. Keeps the recording in $OUT to replay (tuimon replay FILE).
# On a machine with >= 2 GPUs, from the repo root: source .gpu/activate.sh; bash tests/gpu/check_multi_gpu.sh
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TUIMON_SHM_DIR=$(mktemp -d)
nvidia-smi -L
CUDA_VISIBLE_DEVICES=1 python3 -m tuimon run --headless -- python3 -m tuimon.workloads.demo_train --seconds 30 --delay 0.005 > "$OUT/demo.log" 2>&1 &
JOB=$!; sleep 10
python3 -m tuimon record $JOB -o "$OUT/two_gpus.jsonl" --seconds 10 --note "demo workload on GPU 1 of 2 (CUDA_VISIBLE_DEVICES=1)"
wait $JOB
python3 - "$OUT/two_gpus.jsonl" $JOB <<'PY'
import json, statistics, sys
path, job = sys.argv[1], int(sys.argv[2])
rows = [json.loads(l) for l in open(path)][1:]
gpu = [r["data"] for r in rows if r["source"] == "gpu" and r["data"]]
print(f"{'GPU':<5}{'uses target':<13}{'job PID listed':<16}{'SM active mean %':<18}{'memory used GiB':<16}")
ok = True
for i in range(len(gpu[-1])):
    samples = [s[i] for s in gpu[1:]]
    sm = [x["sm_active"] for x in samples if isinstance(x.get("sm_active"), (int, float))]
    uses = samples[-1].get("uses_target")
    listed = any(p.get("pid") == job for p in samples[-1].get("processes") or [])
    print(f"{i:<5}{str(uses):<13}{str(listed):<16}{statistics.mean(sm) if sm else float('nan'):<18.1f}{samples[-1]['mem_used'] / 2**30:<16.2f}")
    ok &= (uses, listed) == ((True, True) if i == 1 else (False, False))
print("multi-GPU check:", "PASS" if ok else "FAIL")
PY
