#!/usr/bin/env bash
# Issue 13 on a real GPU: `top` (every GPU's processes with user and command, the host line,
# --once/--json/--gpus), attach and ls on a real job, a job killed by a signal, a fresh
# recording (v2, with PSS and process names), live screenshots, and the monitor's cost beside
# nvitop. Needs nvitop carried as a wheel. On the GPU machine: source .gpu/activate.sh; bash tests/gpu/check_edges.sh
source tests/gpu/prelude.sh
T=()
row() { T+=("$(printf '%-46s %s' "$1" "$2")"); }
python3 -m compileall -q /tmp/site tuimon >/dev/null 2>&1  # (or the first frame measures compiling)
python3 -m tuimon --version
python3 -m tuimon doctor 2>&1 | tail -12
echo "=== the demo job, headless"
python3 -m tuimon run --headless -- python3 -m tuimon.workloads.demo_train --seconds 200 > "$OUT/demo.log" 2>&1 &
JOB=$!; sleep 8
echo "=== top --once"
python3 -m tuimon top --once | tee "$OUT/top_once.txt"
row "top --once lists the job with user+command" "$(grep -E "^ +$JOB +\S+ .*demo_train" "$OUT/top_once.txt" >/dev/null && echo yes || echo NO)"
python3 -m tuimon top --once --json > "$OUT/top_once.json"
python3 - "$OUT/top_once.json" $JOB <<'PY'
import json, sys
d, pid = json.load(open(sys.argv[1])), int(sys.argv[2])
procs = [p for g in d["gpus"] for p in (g["processes"] if isinstance(g["processes"], list) else [])]
mine = [p for p in procs if p["pid"] == pid]
print("top --once --json: host", d["host"], "| the job:", mine)
PY
python3 -m tuimon top --once --gpus 0 | head -3
python3 -m tuimon top --once --gpus 7 | head -3; echo "(exit $?)"
echo "=== attach --once and ls"
python3 -m tuimon attach $JOB --once --window 2 | tee "$OUT/attach_once.txt"
python3 -m tuimon ls | tee "$OUT/ls.txt"
echo "=== a fresh recording (v2 with PSS, process names, host) and the live screens"
python3 -m tuimon record $JOB -o "$OUT/h100_demo_v2.jsonl" --seconds 35 --note "tuimon demo workload (CNN, bf16 autocast, 2 DataLoader workers, 30 ms/batch), recording format v2" 2>&1 | tail -2
python3 -m tuimon record $JOB -o "$OUT/h100_demo_v2.jsonl" --seconds 1 2>&1 | tail -1; echo "(exit $?: an existing file is kept)"
python3 tests/gpu/live_screenshot.py $JOB 8 "$OUT/live-120x40.svg" 2>&1 | tail -12
python3 tests/gpu/live_screenshot.py top 6 "$OUT/live-top-120x40.svg" 2>&1 | tail -12
echo "=== sampler cost"
python3 benchmarks/sampler_cost.py --seconds 10 | tee "$OUT/sampler_cost.txt" | tail -16
row "sampling CPU % of one core at 1 Hz" "$(awk '/^sampling CPU/{print $NF}' "$OUT/sampler_cost.txt")"
echo "=== the monitor beside nvitop, same job"
python3 benchmarks/ui_budget.py --seconds 30 --warmup 3 \
  --run "tuimon attach (live)=python3 -m tuimon attach $JOB --interval 1" \
  --run "nvitop=python3 -m nvitop --interval 1" \
  --run "tuimon top=python3 -m tuimon top --interval 1" 2>&1 | tee "$OUT/ui_budget.txt" | tail -6
kill $JOB 2>/dev/null; wait $JOB 2>/dev/null
echo "=== a job killed by SIGKILL under tuimon run --plain"
python3 -m tuimon run --plain --interval 0.5 -- python3 -m tuimon.workloads.demo_train --seconds 60 > "$OUT/killed.txt" 2>&1 &
RUN=$!; sleep 10
kill -9 $(pgrep -P $RUN); wait $RUN; CODE=$?
tail -2 "$OUT/killed.txt"
row "tuimon run, job SIGKILLed: exit code" "$CODE ($(grep -o 'killed by SIGKILL' "$OUT/killed.txt" | head -1))"
echo "=== GPU tests"
python3 -m pytest -q -p no:cacheprovider tests/gpu 2>&1 | tail -3
echo; echo "=== summary"
printf '%s\n' "${T[@]}"
sed -n '/^program/,$p' "$OUT/ui_budget.txt"
