#!/usr/bin/env bash
# Baselines and regression alerts on the GPU, one job at a time (two GPU jobs at once would slow
# each other): a baseline of the steady loop; the same loop slowing by 30% (more bf16 matmuls in
# its backward) after 25 s, watched by `attach --plain --baseline` and `export --baseline`; the
# steady loop again for 60 s against the baseline; then what the monitor costs with a baseline
# and the exporter on, beside nvitop. Prints a table last.
# On the GPU machine: source .gpu/activate.sh; OUT=$OUT bash tests/gpu/check_baseline.sh
source tests/gpu/prelude.sh
python3 -m compileall -q /tmp/site tuimon >/dev/null 2>&1
W=tests/workloads/regressing.py
LOGS=$(mktemp -d)  # (only what the table reads goes to $OUT)
stamp() { python3 -c 'import sys, time
for line in sys.stdin: print(f"{time.monotonic():.2f} {line}", end="", flush=True)'; }

echo "=== baseline of the steady loop"
python3 -m tuimon run --headless -- python3 $W --device cuda --seconds 30 > "$LOGS/steady1.log" 2>&1 &
JOB=$!; sleep 10
python3 -m tuimon baseline save $JOB --seconds 10 -o "$OUT/good.json" | tee "$LOGS/baseline.txt"
kill $JOB; wait $JOB 2>/dev/null

echo "=== the loop slowing by 30% after 25 s"
python3 -m tuimon run --headless -- python3 $W --device cuda --seconds 55 --slow-after 25 --truth "$LOGS/truth.json" \
  > "$LOGS/slow.log" 2>&1 &
JOB=$!; sleep 1
python3 -m tuimon attach $JOB --plain --baseline "$OUT/good.json" 2>/dev/null | stamp > "$OUT/slow_plain.txt" &
python3 -m tuimon export $JOB --port 9464 --baseline "$OUT/good.json" 2>/dev/null &
EXP=$!
sleep 20
python3 - $EXP <<'PY' > "$LOGS/export_cpu.txt"
import sys, time, psutil
p = psutil.Process(int(sys.argv[1])); c0 = sum(p.cpu_times()[:2]); t0 = time.monotonic(); time.sleep(20)
print(f"{100 * (sum(p.cpu_times()[:2]) - c0) / (time.monotonic() - t0):.2f} {p.memory_info().rss / 2**20:.0f}")
PY
python3 -m tuimon attach $JOB --once --json --window 8 --baseline "$OUT/good.json" > "$OUT/slow_once.json"
echo "rc $?" > "$LOGS/slow_once.rc"
python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9464/metrics').read().decode())" \
  > "$OUT/metrics.txt"
wait $JOB; kill $EXP 2>/dev/null; sleep 1

echo "=== the steady loop for 60 s against the baseline"
python3 -m tuimon run --headless -- python3 $W --device cuda --seconds 75 > "$LOGS/steady2.log" 2>&1 &
JOB=$!; sleep 1
python3 -m tuimon attach $JOB --plain --baseline "$OUT/good.json" 2>/dev/null | stamp > "$OUT/steady_plain.txt" &
sleep 68
python3 -m tuimon attach $JOB --once --json --window 8 --baseline "$OUT/good.json" > "$LOGS/steady_once.json"
echo "rc $?" > "$LOGS/steady_once.rc"
wait $JOB  # (the next job must not overlap this one: it would slow it, truly)

echo "=== the monitor with a baseline, beside nvitop (same steady job)"
python3 -m tuimon run --headless -- python3 $W --device cuda --seconds 200 > "$LOGS/steady3.log" 2>&1 &
JOB=$!; sleep 8
python3 benchmarks/ui_budget.py --seconds ${SECONDS_EACH:-25} --warmup 3 \
  --run "tuimon attach --baseline=python3 -m tuimon attach $JOB --interval 1 --baseline $OUT/good.json" \
  --run "nvitop=python3 -m nvitop --interval 1" \
  --run "tuimon attach=python3 -m tuimon attach $JOB --interval 1" 2>&1 | tee "$OUT/ui_budget.txt" | tail -5
kill $JOB 2>/dev/null; wait 2>/dev/null

python3 - "$OUT" "$LOGS" <<'PY' | tee "$OUT/table.txt"
import json, re, sys
out, logs = sys.argv[1:3]
truth = json.load(open(f"{logs}/truth.json"))
base = json.load(open(f"{out}/good.json"))
def lines(name):
    return [(float(l.split(" ", 1)[0]), l.split(" ", 1)[1].strip()) for l in open(f"{out}/{name}") if " " in l]
slow = lines("slow_plain.txt")
flag = next((t for t, l in slow if "REGRESSION" in l), None)
early = [l for t, l in slow if t < truth["slowed_at"] and "REGRESSION" in l]
steady_all = lines("steady_plain.txt")
steady = [l for _, l in steady_all if "baseline" in l or "REGRESSION" in l]
t_first = steady_all[0][0] if steady_all else 0
flagged_at = [f"{t - t_first:.0f}s" for t, l in steady_all if "REGRESSION" in l]
once = json.load(open(f"{out}/slow_once.json"))["baseline"]
sonce = json.load(open(f"{logs}/steady_once.json"))["baseline"]
true_ratio = (truth["ms_after"] / truth["steps_after"]) / (truth["ms_before"] / truth["steps_before"])
m = open(f"{out}/metrics.txt").read()
reg = re.search(r"^tuimon_regression\{[^}]*\} (\S+)", m, re.M)
gpu_series = sorted({x for x in re.findall(r"^(tuimon_gpu_\w+)\{", m, re.M)})
cpu, rss = open(f"{logs}/export_cpu.txt").read().split()
print("\n=== table")
print(f"baseline: {base['steps']} steps, mean {base['step_time_ms']['mean']} ms (p50 {base['step_time_ms']['p50']}), GPU {base['gpu_models']}, "
      f"GPU step {base['gpu_step_ms']} ms, activity {base['gpu_activity']}")
print(f"slowing loop: own mean step {truth['ms_before'] / truth['steps_before']:.2f} -> "
      f"{truth['ms_after'] / truth['steps_after']:.2f} ms (x{true_ratio:.3f})")
print(f"  first REGRESSION line {flag - truth['slowed_at']:.1f} s after the slowdown; before it: {len(early)} "
      "regression lines" if flag else "  NOT FLAGGED")
print(f"  --once --json: {open(f'{logs}/slow_once.rc').read().strip()}, state {once['state']}, ratio {once['ratio']}, "
      f"grown {once['grown']}, GPU step {once['gpu_step_ms']} vs {once['baseline_gpu_step_ms']} ms")
print(f"  exporter: tuimon_regression {reg.group(1) if reg else 'absent'}; GPU series {len(gpu_series)}; "
      f"its CPU {cpu}% of a core, RSS {rss} MB")
print(f"steady loop, 60 s: {len(steady)} lines, {sum('REGRESSION' in l for l in steady)} regression, "
      f"{sum('as baseline' in l for l in steady)} 'as baseline' (regression at {flagged_at}); --once: "
      f"{open(f'{logs}/steady_once.rc').read().strip()}, {sonce['state']}, ratio {sonce['ratio']}")
PY
