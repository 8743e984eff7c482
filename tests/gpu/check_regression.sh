#!/usr/bin/env bash
# Regressions as users have them, on the GPU, one job at a time (issue 23). Prints a table last.
#  A. a real client with fewer workers: an ImageNet-style loop (tests/workloads/imagenet_like.py:
#     ResNet-50 where torchvision is installed, workers decoding JPEGs) with 8 workers saved as the
#     baseline, then the same script with 2 workers, watched from its start: time to the alert, the
#     ratio against the job's own throughput (its step log);
#  B. a large-step job: steps of ~1.2 s (bf16 matmuls in the backward) that grow by half after 70 s:
#     time to the alert after the slowdown, the ratio against the loop's own timer;
#  C. a peak memory that grows: the same loop keeps 4 GiB more from 40 s on: time to the alert.
# On the GPU machine: source .gpu/activate.sh; OUT=$OUT bash tests/gpu/check_regression.sh
source tests/gpu/prelude.sh
python3 -m compileall -q tuimon >/dev/null 2>&1
R=tests/workloads/regressing.py
I=tests/workloads/imagenet_like.py
LOGS=$(mktemp -d)
stamp() { python3 -c 'import sys, time
for line in sys.stdin: print(f"{time.monotonic():.2f} {line}", end="", flush=True)'; }
now() { python3 -c 'import time; print(f"{time.monotonic():.2f}")'; }

echo "=== A. baseline: the ImageNet-style client with 8 workers"
python3 -m tuimon run --headless -- python3 $I --workers 8 --seconds 70 --step-log "$LOGS/a8.steps" > "$LOGS/a8.log" 2>&1 &
JOB=$!; sleep 12
now > "$LOGS/a8.saving"
python3 -m tuimon baseline save $JOB --seconds 40 -o "$OUT/a8.json" | tee "$OUT/a8_baseline.txt"
now >> "$LOGS/a8.saving"
kill $JOB; wait $JOB 2>/dev/null
echo "=== A. the same client with 2 workers, watched from its start"
now > "$LOGS/a2.start"
python3 -m tuimon run --plain --baseline "$OUT/a8.json" -- python3 $I --workers 2 --seconds 100 \
  --step-log "$LOGS/a2.steps" 2>/dev/null | stamp > "$OUT/a2_plain.txt" &
sleep 70
JOB=$(python3 -m tuimon ls | awk '$2 == "alive" {print $1; exit}')  # (the job's channel: the one alive here)
python3 -m tuimon attach $JOB --once --json --window 20 --baseline "$OUT/a8.json" > "$OUT/a2_once.json"
echo "rc $?" > "$LOGS/a2_once.rc"
wait

echo "=== B. steps of ~1.2 s that grow by half after 70 s"
python3 -m tuimon run --headless -- python3 $R --device cuda --backward-ms 1200 --other-ms 0 --seconds 160 \
  --slow-after 70 --slow-by 0.5 --truth "$LOGS/b.truth" > "$LOGS/b.log" 2>&1 &
JOB=$!; sleep 2
python3 -m tuimon baseline save $JOB --seconds 60 -o "$OUT/b.json" | tee "$OUT/b_baseline.txt"
python3 -m tuimon attach $JOB --plain --baseline "$OUT/b.json" 2>/dev/null | stamp > "$OUT/b_plain.txt" &
sleep 85
python3 -m tuimon attach $JOB --once --json --window 3 --baseline "$OUT/b.json" > "$OUT/b_once.json"
echo "rc $?" > "$LOGS/b_once.rc"
wait $JOB; sleep 1

echo "=== C. a peak memory that grows by 4 GiB after 40 s"
python3 -m tuimon run --headless -- python3 $R --device cuda --seconds 70 --slow-after 40 --slow-by 0 --grow-mib 4096 \
  --truth "$LOGS/c.truth" > "$LOGS/c.log" 2>&1 &
JOB=$!; sleep 2
python3 -m tuimon baseline save $JOB --seconds 30 -o "$OUT/c.json" | tee "$OUT/c_baseline.txt"
python3 -m tuimon attach $JOB --plain --baseline "$OUT/c.json" 2>/dev/null | stamp > "$OUT/c_plain.txt" &
sleep 25
python3 -m tuimon attach $JOB --once --json --window 6 --baseline "$OUT/c.json" > "$OUT/c_once.json"
echo "rc $?" > "$LOGS/c_once.rc"
wait $JOB; sleep 1; pkill -P $$ 2>/dev/null

python3 - "$OUT" "$LOGS" <<'PY' | tee "$OUT/table.txt"
import json, statistics, sys
out, logs = sys.argv[1:3]
def lines(name):
    rows = []
    for l in open(f"{out}/{name}"):
        t, _, rest = l.partition(" ")
        try:
            rows.append((float(t), rest.strip()))
        except ValueError:
            pass
    return rows
def steps(name):
    return [tuple(map(float, r.split())) for r in open(f"{logs}/{name}") if r.strip()]
def first(rows, word, since=0.0):
    return next((t for t, l in rows if word in l and t >= since), None)
def once(name):
    try:
        doc = json.load(open(f"{out}/{name}_once.json"))["baseline"]
    except (OSError, ValueError, KeyError) as e:
        doc = {"state": f"unreadable: {e}"}
    return doc, open(f"{logs}/{name}_once.rc").read().split()[-1]
table = []
# A
s0, s1 = map(float, open(f"{logs}/a8.saving").read().split())
a8 = [ms for t, ms in steps("a8.steps") if s0 <= t <= s1]
start = float(open(f"{logs}/a2.start").read())
a2s = steps("a2.steps")
a2 = [ms for t, ms in a2s if t >= start + 15]
own = statistics.mean(a2) / statistics.mean(a8) if a8 and a2 else float("nan")
rows = lines("a2_plain.txt")
flag = first(rows, "REGRESSION")
doc, rc = once("a2")
table.append(("A. 8 -> 2 workers (ImageNet-style client)",
              f"{1e3 / statistics.mean(a8):.2f} -> {1e3 / statistics.mean(a2):.2f} steps/s (own timer; x{own:.2f} step time)",
              (f"REGRESSION {flag - start:.1f} s after the job started" if flag else "NOT FLAGGED")
              + f"; --once: exit {rc}, {doc.get('state')}, ratio {doc.get('ratio')} (vs own {own:.2f}), "
                f"p50 {doc.get('p50_ms')} vs {doc.get('baseline_p50_ms')} ms, grown {(doc.get('grown') or {}).get('name')}"))
# B
truth = json.load(open(f"{logs}/b.truth"))
own = (truth["ms_after"] / truth["steps_after"]) / (truth["ms_before"] / truth["steps_before"])
rows = lines("b_plain.txt")
flag = first(rows, "REGRESSION", truth["slowed_at"] or 0)
early = sum("REGRESSION" in l for t, l in rows if truth["slowed_at"] and t < truth["slowed_at"])
doc, rc = once("b")
table.append(("B. ~1.2 s steps, +50% after 70 s",
              f"mean step {truth['ms_before'] / truth['steps_before']:.0f} -> {truth['ms_after'] / max(1, truth['steps_after']):.0f} ms (x{own:.3f})",
              (f"REGRESSION {flag - truth['slowed_at']:.1f} s after the slowdown" if flag else "NOT FLAGGED")
              + f", {early} regression lines before it; --once: exit {rc}, {doc.get('state')}, ratio {doc.get('ratio')}, "
                f"GPU step {doc.get('gpu_step_ms')} vs {doc.get('baseline_gpu_step_ms')} ms, grown "
                f"{(doc.get('gpu_grown') or doc.get('grown') or {}).get('name')}"))
# C
truth = json.load(open(f"{logs}/c.truth"))
rows = lines("c_plain.txt")
flag = first(rows, "REGRESSION", truth["slowed_at"] or 0)
early = sum("REGRESSION" in l for t, l in rows if truth["slowed_at"] and t < truth["slowed_at"])
said = next((l for t, l in rows if "REGRESSION" in l), "")
doc, rc = once("c")
mem = doc.get("peak_memory") or {}
table.append(("C. +4 GiB held after 40 s",
              f"peak allocated {mem.get('baseline_bytes', 0) / 2**30:.2f} -> {mem.get('now_bytes', 0) / 2**30:.2f} GiB",
              (f"REGRESSION {flag - truth['slowed_at']:.1f} s after it grew" if flag else "NOT FLAGGED")
              + f", {early} before; --once: exit {rc}; said: {said[said.find('REGRESSION'):][:90]}"))
print("\n=== table")
print("| case | the job's own | tuimon |\n| --- | --- | --- |")
for r in table:
    print("| " + " | ".join(r) + " |")
PY
