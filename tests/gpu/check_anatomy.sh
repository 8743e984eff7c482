#!/usr/bin/env bash
# Issue 9 on a real GPU: the planted loops under `tuimon run` beside their own truth (a table last),
# and the Nsight Compute thresholds the diagnosis cites, read from this machine's ncu.
# On the GPU machine, from the repo root: source .gpu/activate.sh; bash tests/gpu/check_anatomy.sh
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TUIMON_SHM_DIR=$(mktemp -d) TUIMON_CAPTURE_DIR=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
if command -v gcc >/dev/null && python3 -c "import setuptools" 2>/dev/null; then
  python3 setup.py -q build_ext --inplace >/dev/null 2>&1
fi
python3 -c "from tuimon.channel import ring; print('hot path:', ring.IMPLEMENTATION)"
echo "=== Nsight Compute's SOLBottleneck rule on this machine"
grep -rn "latency_bound_threshold =\|no_bound_threshold =\|balanced_threshold =" /opt/nvidia/nsight-compute/ --include=*.py 2>/dev/null | head -4
python3 tests/gpu/check_diagnosis.py "$OUT" "$@" 2>&1 | tee "$OUT/diagnosis.txt"
