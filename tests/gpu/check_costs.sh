#!/usr/bin/env bash
# Issues 8 and 9 on a real GPU: what the probe (with the step anatomy) costs a real model's step,
# what a range costs, what sampling costs, the monitor beside nvitop on the same job, a fresh
# recording of the demo (format v2, with the anatomy) and a screenshot of the live screen.
# Needs nvitop carried as a wheel. On the GPU machine: source .gpu/activate.sh; bash tests/gpu/check_costs.sh
source tests/gpu/prelude.sh
T=()
row() { T+=("$(printf '%-44s %s' "$1" "$2")"); }
# A normal install compiles bytecode; the carried wheels are installed without: compile them
# first, or the first frame measures Python compiling textual.
python3 -m compileall -q /tmp/site tuimon >/dev/null 2>&1
if [ "${SKIP_RESNET:-0}" != 1 ]; then
echo "=== step overhead: ResNet-50, everything on"
python3 benchmarks/step_overhead.py --model resnet50 --pairs 8 --block-steps 30 --warmup 30 | tee "$OUT/overhead_resnet.txt"
row "step overhead ResNet-50 (on/off)" "$(awk '/^ratio/{r=$NF} /^per-pair/{q=$(NF-2)".."$NF} END{print r"x, p25..p75 "q}' "$OUT/overhead_resnet.txt")"
fi
echo "=== step overhead: demo CNN"
python3 benchmarks/step_overhead.py --pairs 8 --block-steps 50 | tee "$OUT/overhead_demo.txt"
row "step overhead demo CNN (on/off)" "$(awk '/^ratio/{r=$NF} /^per-pair/{q=$(NF-2)".."$NF} END{print r"x, p25..p75 "q}' "$OUT/overhead_demo.txt")"
echo "=== Nsight Compute's speed-of-light rule (the thresholds the diagnosis cites)"
grep -n "threshold = " /opt/nvidia/nsight-compute/*/sections/SpeedOfLight.py 2>/dev/null
echo "=== range cost"
python3 benchmarks/probe_overhead.py --n 200000 | tee "$OUT/probe_overhead.txt"
row "tuimon.range [c] / nvtx.annotate" "$(awk 'index($0, "tuimon.range [c]  ") == 1 {print $NF"x, "$(NF-1)" ns"}' "$OUT/probe_overhead.txt")"
echo "=== sampler cost"
python3 benchmarks/sampler_cost.py --seconds 10 | tee "$OUT/sampler_cost.txt"
echo "=== a fresh recording of the demo (format v2) and the live screen"
python3 -m tuimon run --headless -- python3 -m tuimon.workloads.demo_train --seconds 150 > "$OUT/demo.log" 2>&1 &
JOB=$!; sleep 6
python3 -m tuimon record $JOB -o "$OUT/h100_demo_v2.jsonl" --seconds 35 --note "tuimon demo workload (CNN, bf16 autocast, 2 DataLoader workers, 30 ms/batch), recording format v2" 2>&1 | tail -2
python3 tests/gpu/live_screenshot.py $JOB 8 "$OUT/live-120x40.svg" 2>&1 | tail -2
echo "=== the monitor beside nvitop, same job"
python3 benchmarks/ui_budget.py --seconds 30 --warmup 3 \
  --run "tuimon attach (live)=python3 -m tuimon attach $JOB --interval 1" \
  --run "nvitop=python3 -m nvitop --interval 1" \
  --run "tuimon replay=python3 -m tuimon replay tests/fixtures/h100_demo_v2.jsonl" 2>&1 | tee "$OUT/ui_budget.txt"
python3 -m tuimon attach $JOB --once --json > "$OUT/demo_attach.json"
kill $JOB 2>/dev/null; wait $JOB 2>/dev/null
python3 -c "import json; d=json.load(open('$OUT/demo_attach.json')); v=d['verdict']; print('demo verdict:', v['headline'], '|', v['evidence'], '|', v['next_step']); print('phases', [(p['name'], p['share']) for p in d['phases']], 'gpu', d['gpu'], 'memory', d['memory'])"
echo "=== GPU tests"
python3 -m pytest -q -p no:cacheprovider tests/gpu 2>&1 | tail -3
echo; echo "=== summary"
printf '%s\n' "${T[@]}"
