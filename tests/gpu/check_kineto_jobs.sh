#!/usr/bin/env bash
# Issue 41's Done-when on a real GPU: Kineto's on-demand windows beside today's torch.profiler windows,
# in one run per job (benchmarks/kineto_cost.py, 3 windows of 20 steps of each kind), on three jobs:
#   kernels   tests/workloads/gpu_loops.py kernels (~3,000 kernels a step)
#   gpt       tests/workloads/gpu_loops.py gpt (a small GPT, AdamW, bf16 autocast)
#   imagenet  torchvision's ImageNet example (.whl2/imagenet_main.py --dummy -a resnet50 -b 128 -j 4
#             --gpu 0), torchvision from the carried wheels in .whl2 (installed into /tmp/site2)
# Each job's rows and each Kineto window's top 5 kernels go to $OUT/kineto_jobs.txt as they come; a
# table last (worst step <= 1.2x the worst normal one, time lost <= one typical step).
# NSYS=1: then one nsys window (20 steps) of the kernels loop the way tuimon takes them (`tuimon run
# --nsys`, `tuimon capture`), its top 5 kernels (nsys stats cuda_gpu_kern_sum) beside each Kineto
# window's of the kernels run, and how many of the top 5 agree. Needs the kernels job in the same run.
# Wall time: kernels ~1.5 min, gpt ~1.5 min, imagenet ~2.5 min, NSYS ~1 min (each capped by a timeout).
# DEVICE=cpu WINDOWS=1 STEPS=5: a smoke test of the plumbing on a CPU host (the loops on the CPU).
# On the GPU machine, from the repo root: source .gpu/activate.sh; [NSYS=1] bash tests/gpu/check_kineto_jobs.sh [JOB ...]
source tests/gpu/prelude.sh
JOBS=("$@"); [ ${#JOBS[@]} -eq 0 ] && JOBS=(kernels gpt imagenet)
DEVICE=${DEVICE:-cuda} WINDOWS=${WINDOWS:-3} STEPS=${STEPS:-20}
LOG="$OUT/kineto_jobs.txt"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
  python3 -c "import torch; print('torch', torch.__version__)"; echo "jobs: ${JOBS[*]}; ${WINDOWS:-3} windows of ${STEPS:-20} steps; NSYS=${NSYS:-0}"; } 2>&1 | tee -a "$LOG"

one() {  # NAME TIMEOUT_S COMMAND...: a kineto_cost.py run on one job
  local name=$1 limit=$2; shift 2
  echo "=== $name: $*" | tee -a "$LOG"
  rm -f "$OUT/kineto_top.$name.jsonl"
  timeout "$limit" python3 benchmarks/kineto_cost.py --windows "$WINDOWS" --steps "$STEPS" --top 5 --kinds "${KINDS:-kineto,torch.profiler}" \
    --top-json "$OUT/kineto_top.$name.jsonl" --job-log "$OUT/kineto_job.$name.log" -- "$@" 2>&1 | tee "$OUT/kineto_jobs.$name.txt" | tee -a "$LOG"
  echo "(exit ${PIPESTATUS[0]})" | tee -a "$LOG"
}

for job in "${JOBS[@]}"; do
  case $job in
    kernels|gpt) one "$job" 150 python3 tests/workloads/gpu_loops.py "$job" --device "$DEVICE" --seconds 600 ;;
    imagenet)
      if [ ! -f .whl2/imagenet_main.py ]; then echo "=== imagenet: skipped, no .whl2/imagenet_main.py (carry .whl2)" | tee -a "$LOG"; continue; fi
      if ! PYTHONPATH=/tmp/site2 python3 -c "import torchvision" 2>/dev/null; then
        python3 -m pip install -q --no-index --no-deps --target /tmp/site2 .whl2/torchvision-*.whl .whl2/pillow-*.whl 2>&1 | tail -2
      fi
      # (this example's --gpu 0 still wraps the model in DataParallel: one visible GPU makes it a pass-through)
      export PYTHONPATH=/tmp/site2:$PYTHONPATH CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
      python3 -c "import torchvision; print('torchvision', torchvision.__version__)" 2>&1 | tee -a "$LOG"
      one imagenet 200 python3 .whl2/imagenet_main.py --dummy -a resnet50 -b 128 -j 4 --epochs 1 --gpu 0 ;;
    *) echo "unknown job $job (kernels, gpt, imagenet)" | tee -a "$LOG" ;;
  esac
done

if [ "${NSYS:-0}" = 1 ]; then
  echo "=== nsys: one 20-step window of the kernels loop under tuimon run --nsys" | tee -a "$LOG"
  if command -v nsys >/dev/null; then
    export TUIMON_CAPTURE_DIR=$(mktemp -d)
    timeout 150 python3 -m tuimon run --headless --nsys -- python3 tests/workloads/gpu_loops.py kernels --device cuda \
      --seconds 600 >"$OUT/nsys_kernels_job.log" 2>&1 &
    JOB=$!; sleep 20
    timeout 110 python3 -m tuimon capture $JOB --steps 20 --wait --timeout 100 2>&1 | tee "$OUT/nsys_kernels_capture.txt" | tail -20 | tee -a "$LOG"
    kill -INT $JOB 2>/dev/null; sleep 5; kill $JOB 2>/dev/null; wait $JOB 2>/dev/null
    ls "$TUIMON_CAPTURE_DIR"/*.nsys-rep 2>/dev/null | head -1 >"$OUT/nsys_kernels_report.txt"
  else
    echo "skipped: no nsys on PATH (source .gpu/activate.sh)" | tee -a "$LOG"
  fi
fi

# the table
python3 - "$OUT" "${NSYS:-0}" <<'EOF' 2>&1 | tee -a "$LOG"
import json, os, sys

from tuimon.capture import nsys as nsys_tools
from tuimon.capture.ncu import function_name

out, want_nsys = sys.argv[1], sys.argv[2] == "1"
print("=== issue 41: windows of each kind in one run per job, Kineto vs torch.profiler; pass: worst step <= 1.2x the worst")
print("    normal one and time lost <= one typical step, in every window")
for name in ("kernels", "gpt", "imagenet"):
    p = os.path.join(out, f"kineto_jobs.{name}.txt")
    if not os.path.exists(p):
        continue
    lines = open(p).read().splitlines()
    rows = [x for x in lines if x.startswith(("kineto ", "torch.profiler "))]
    at = next((i for i, x in enumerate(lines) if x.startswith("=== summary")), len(lines))
    summ = [x for x in lines[at + 1:] if x.strip().startswith(("kineto ", "torch.profiler "))]
    print(f"--- {name}: {len(rows)} windows judged")
    for x in rows:
        print("    " + x[:100])
    for x in summ:
        print("    summary " + x.strip())
    if not summ:
        print("    no summary (cut by its timeout?):", lines[-1][:200] if lines else "no output")

if want_nsys:
    print("=== top 5 kernels: nsys window vs each Kineto window of the kernels loop")
    try:
        rep = open(os.path.join(out, "nsys_kernels_report.txt")).read().strip()
    except OSError:
        rep = ""
    tool = nsys_tools.find_nsys()
    if not rep or tool is None:
        print("    no nsys report" if not rep else "    no nsys to read it")
        sys.exit(0)
    s = nsys_tools.stats(tool, rep, top=5)
    nsys_top = [r["name"] for r in s["cuda_gpu_kern_sum"][:5]]
    print(f"    nsys ({os.path.basename(rep)}):")
    for r in s["cuda_gpu_kern_sum"][:5]:
        print(f"      {r['time_pct']:>6}% {r['instances']:>7}x  {r['name'][:140]}")
    try:
        windows = [json.loads(x) for x in open(os.path.join(out, "kineto_top.kernels.jsonl"))]
    except OSError:
        windows = []
    if not windows:
        print("    no Kineto windows of the kernels loop (run the kernels job in the same command)")
    for w in windows:
        k_top = [r["name"] for r in w["top"][:5]]
        same = len(set(k_top) & set(nsys_top))
        same_fn = len({function_name(n) for n in k_top} & {function_name(n) for n in nsys_top})
        print(f"    kineto window {w['window']} ({w['what']}): {same}/5 of the top 5 names agree with nsys's "
              f"({same_fn} by function name)")
        for n in k_top:
            print(f"      {'=' if n in nsys_top else ' '} {n[:140]}")
EOF
