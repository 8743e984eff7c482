#!/usr/bin/env bash
# Issue 10, item 4: do nsys's GPU metrics (--gpu-metrics-devices) and tuimon's own GPM sampling
# coexist on one GPU? A GPU loop under `tuimon run --headless --nsys --nsys-args
# "--gpu-metrics-devices=all"`, `tuimon attach --plain` sampling GPM every second with timestamps,
# one 40-step window; what each side says before, during and after. Needs .libdw. Table last.
source tests/gpu/prelude.sh
L=$(mktemp -d); export TUIMON_CAPTURE_DIR=$L/captures
stamp() { python3 -c 'import sys, time
for line in sys.stdin: print(f"{time.monotonic():.2f} {line}", end="", flush=True)'; }
python3 -m tuimon run --headless --nsys --nsys-args="--gpu-metrics-devices=all" -- \
  python3 tests/workloads/regressing.py --device cuda --seconds 70 > "$L/job.log" 2>&1 &
JOB=$!; sleep 25
python3 -m tuimon attach $JOB --plain 2>&1 | stamp > "$L/attach.txt" &
sleep 8
python3 -m tuimon capture $JOB --steps 40 --wait --timeout 120 2>&1 | stamp > "$L/cap.txt"
sleep 8
python3 -m tuimon top --once --json --window 2 > "$L/top.json" 2>&1
wait $JOB
python3 - "$L" <<'PY' | tee "$OUT/table.txt"
import json, re, sys
L = sys.argv[1]
cap = [l.rstrip() for l in open(f"{L}/cap.txt")]
att = [l.rstrip() for l in open(f"{L}/attach.txt")]
t = lambda l: float(l.split(" ", 1)[0])
start = next((t(l) for l in cap if "capturing:" in l), None)
stop = next((t(l) for l in cap if "writing:" in l), None)
print("=== table")
print("capture:", *[l.split(" ", 1)[1][:200] for l in cap if re.search(r"asked|capturing|writing|done|failed|tuimon:", l)][:6], sep="\n  ")
for name, keep in (("before", lambda x: start and x < start), ("during", lambda x: start and stop and start <= x <= stop),
                   ("after", lambda x: stop and x > stop)):
    rows = [l for l in att if keep(t(l))]
    sm = [re.search(r"SM (\d+)%", l) for l in rows]
    probs = [l.split(" ", 1)[1][:160] for l in rows if "tuimon:" in l]
    print(f"{name}: {len(rows)} lines, SM% {[int(m.group(1)) for m in sm if m][:12]}; problems {probs[:3]}")
try:
    g = json.load(open(f"{L}/top.json"))["gpus"][0]
    print("after the window, top --once: sm_active", g.get("sm_active"), "errors", g.get("errors"))
except Exception as e:
    print("top --once:", e, open(f"{L}/top.json").read()[:300])
print("job log tail:", open(f"{L}/job.log").read()[-400:])
PY
