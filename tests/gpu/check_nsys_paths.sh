#!/usr/bin/env bash
# The report path the probe names for each nsys window exists once the job exits, and tuimon's
# summary of it reads (kernels and the probe's NVTX ranges).
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export TUIMON_SHM_DIR=$(mktemp -d) TUIMON_CAPTURE_DIR=/tmp/tuimon-captures3
python3 -m tuimon run --headless --nsys -- python3 -m tuimon.workloads.demo_train --seconds 35 > /tmp/job3.log 2>&1 &
JOB=$!; sleep 12
for i in 1 2; do python3 -m tuimon capture $JOB --steps 10 --wait 2>&1 | tee -a /tmp/paths.txt; sleep 4; done
wait $JOB
python3 - <<'PY'
import os
from tuimon.capture.summary import summarize
from tuimon.channel.control import KIND_NSYS, State
paths = [l.strip() for l in open("/tmp/paths.txt") if l.strip().endswith(".nsys-rep")]
print("paths the probe named:", paths)
for p in paths:
    s = summarize(State(1, 4, 0, 0, KIND_NSYS, 0, "", p))
    print(os.path.basename(p), "exists" if os.path.exists(p) else "MISSING", s["size"])
    print("\n".join(s["lines"][:4] + s["lines"][6:10]))
PY
