#!/usr/bin/env bash
# Issue 41 on a real GPU: capture windows through Kineto's on-demand path (tuimon as the host's
# "dynolog" endpoint) beside today's torch.profiler windows, on one job each: the CPU loop of ~1,500
# small ops a step, then the ~3,000-kernel CUDA loop. A table per job in $OUT/kineto.txt, written as
# each window ends (benchmarks/kineto_cost.py). Under 4 minutes.
# On the GPU machine, from the repo root: source .gpu/activate.sh; bash tests/gpu/check_kineto.sh
source tests/gpu/prelude.sh
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__)"
  python3 -c "
import glob, mmap, os, torch
lib = glob.glob(os.path.join(os.path.dirname(torch.__file__), 'lib', 'libtorch_cpu.so'))[0]
with open(lib, 'rb') as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
    print('Kineto daemon client in this torch:', m.find(b'dynoconfigclient') >= 0)"
} 2>&1 | tee "$OUT/kineto.txt"
echo "=== CPU: small ops (~1,500 a step), 2 windows of 10 steps of each kind" | tee -a "$OUT/kineto.txt"
timeout 110 python3 benchmarks/kineto_cost.py --windows 2 --steps 10 2>&1 | tee -a "$OUT/kineto.txt"
echo "=== CUDA: ~3,000 kernels a step, 2 windows of 20 steps of each kind" | tee -a "$OUT/kineto.txt"
timeout 120 python3 benchmarks/kineto_cost.py --windows 2 --steps 20 -- python3 tests/workloads/gpu_loops.py kernels \
  --device cuda --seconds 600 2>&1 | tee -a "$OUT/kineto.txt"
