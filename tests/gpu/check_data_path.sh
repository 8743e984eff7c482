#!/usr/bin/env bash
# The data path on a real GPU (issue 2): probe and drain benchmarks, with and without nsys; the
# demo workload on CUDA through `tuimon run`; torch.cuda.nvtx through the real CUDA NVTX; the
# probe's ranges in an nsys report; the probe's cost on a GPU training step; the test suite.
# On the GPU machine, from the repo root: source .gpu/activate.sh; bash tests/gpu/check_data_path.sh
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TUIMON_SHM_DIR=$(mktemp -d)
PY=python3
T=()  # table rows
row() { T+=("$(printf '%-46s %s' "$1" "$2")"); }
hr() { echo; echo "=== $*"; }

hr "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
command -v nsys && nsys --version

hr "probe hot path: build the C extension here when a compiler is found"
if command -v gcc >/dev/null && $PY -c "import setuptools" 2>/dev/null; then
  $PY setup.py -q build_ext --inplace 2>&1 | grep -v "unused parameter\|^\s*|\|^\s*[0-9]* |\|~~~\|In function" | tail -3
else
  echo "no gcc or setuptools here: using whatever _fastring build was carried"
fi
$PY -c "from tuimon.channel import ring; print('hot path:', ring.IMPLEMENTATION, ring.C_UNAVAILABLE or '')" | tee "$OUT/hot_path.txt"
row "probe hot path in use" "$(sed -n 's/hot path: //p' "$OUT/hot_path.txt")"

hr "probe overhead, no NVTX tool"
$PY benchmarks/probe_overhead.py --n 200000 | tee "$OUT/probe_overhead.txt"
# Columns: the variant's name, ns/range, x annotate (the last two fields).
ratio() { awk -v pat="$1" 'index($0, pat) == 1 {print $NF"x, "$(NF-1)" ns"}' "$2"; }
row "probe [c]: tuimon.range / annotate (no tool)" "$(ratio 'tuimon.range [c]  ' "$OUT/probe_overhead.txt")"
row "probe [c]: + NVTX forwarding (no tool)" "$(ratio 'tuimon.range [c] + NVTX' "$OUT/probe_overhead.txt")"
row "probe [python]: tuimon.range (no tool)" "$(ratio 'tuimon.range [python]  ' "$OUT/probe_overhead.txt")"
row "probe [python]: + NVTX forwarding (no tool)" "$(ratio 'tuimon.range [python] + NVTX' "$OUT/probe_overhead.txt")"

hr "probe overhead under nsys (NVTX tool attached)"
nsys profile -t nvtx -o "$OUT/bench_nsys" -f true $PY benchmarks/probe_overhead.py --n 50000 --repeat 5 2>&1 | grep -v "^Collecting\|^Generating\|^Processing\|^\s*$" | tee "$OUT/probe_overhead_nsys.txt"
row "probe [c] under nsys: tuimon.range / annotate" "$(ratio 'tuimon.range [c]  ' "$OUT/probe_overhead_nsys.txt")"
row "probe [c] under nsys: + forwarding / annotate" "$(ratio 'tuimon.range [c] + NVTX' "$OUT/probe_overhead_nsys.txt")"

hr "drain"
$PY benchmarks/channel_drain.py | tee "$OUT/drain.txt"
row "drain rate (records/s), 200k/s writer, 10 Hz" "$(awk '/drain rate/{print $4}' "$OUT/drain.txt")"
row "records lost" "$(awk '/records lost/{print $3}' "$OUT/drain.txt")"

hr "demo workload on CUDA through tuimon run --headless"
$PY -m tuimon run --headless -- $PY -m tuimon.workloads.demo_train --seconds 25 > "$OUT/demo.log" 2>&1 &
JOB=$!
sleep 20
$PY -m tuimon attach $JOB --once --json --window 1 | tee "$OUT/demo_attach.json"
wait $JOB; echo "demo exit $?"
row "demo on GPU: steps seen live" "$($PY -c "import json;d=json.load(open('$OUT/demo_attach.json'));print(d['steps'], 'steps,', d['step_time_ms']['p50'], 'ms p50, data wait', d['data_wait_share'], ', ranges', [r['name'] for r in d['ranges']])")"

hr "torch.cuda.nvtx through the real CUDA NVTX library"
$PY - <<'PYEOF' | tee "$OUT/torch_nvtx.txt"
import os, tuimon, torch
tuimon.instrument()
import torch.cuda.nvtx as n
x = torch.randn(1024, 1024, device="cuda")
n.range_push("cuda_push"); y = x @ x; n.range_pop()
with n.range("cuda_ctx_{}", 1):
    y = y @ x
torch.cuda.synchronize()
from tuimon.channel import SegmentReader
r = SegmentReader(tuimon.status().path)
print("torch.cuda.nvtx ranges:", [(r.name(x[3]), x[1]) for x in r.drain().records if x[0] == 1])
PYEOF
row "torch.cuda.nvtx ranges seen by the probe" "$(sed -n 's/torch.cuda.nvtx ranges: //p' "$OUT/torch_nvtx.txt")"

hr "the probe ranges in an nsys report"
nsys profile -t cuda,nvtx -o "$OUT/demo_nsys" -f true $PY -m tuimon run --headless -- $PY -c "
import os, runpy, sys
print('NVTX_INJECTION64_PATH set:', bool(os.environ.get('NVTX_INJECTION64_PATH')))
import tuimon; print('forwarding:', tuimon.status().nvtx_forwarding)
sys.argv = ['demo', '--steps', '60']
runpy.run_module('tuimon.workloads.demo_train', run_name='__main__')
" 2>&1 | grep -v "^Collecting\|^Generating\|^Processing\|^\s*$" | tail -5
nsys stats --report nvtx_sum --format csv "$OUT/demo_nsys.nsys-rep" 2>/dev/null | tee "$OUT/nvtx_sum.csv" | head -12
nsys stats --report cuda_gpu_kern_sum --format csv "$OUT/demo_nsys.nsys-rep" 2>/dev/null | head -4
row "nsys nvtx_sum has probe ranges" "$(grep -oE '(forward|backward|optimizer|h2d|sync)' "$OUT/nvtx_sum.csv" | sort -u | tr '\n' ' ')"

hr "step overhead of the probe on a GPU training step, monitor attached (one process, alternating blocks)"
$PY benchmarks/step_overhead.py --pairs 12 --block-steps 50 | tee "$OUT/step_overhead.txt"
row "step overhead (probe on/off, median blocks)" "$(awk '/^ratio/{r=$NF} /^per-pair/{q=$(NF-2)".."$NF} END{print r"x, per-pair p25..p75 "q}' "$OUT/step_overhead.txt")"

hr "test suite"
$PY -m pytest -q -p no:cacheprovider tests 2>&1 | tail -4 | tee "$OUT/pytest.txt"
row "pytest on the GPU machine" "$(tail -1 "$OUT/pytest.txt")"

echo; echo "=== summary"
printf '%s\n' "${T[@]}"
