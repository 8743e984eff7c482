#!/usr/bin/env bash
# Issue 43 item 3 on a real GPU: a loop with two sync call sites a step (`loss.item()` in its step
# function, ~30% of the step; `torch.cuda.synchronize()` in the loop body, ~15%; see
# tests/workloads/sync_sites.py) under `tuimon run --headless`, then the same loop run plainly and
# `tuimon inject`ed. tuimon's sync sites (attach --once --json) beside the loop's own timers; a table
# last, lines appended to $OUT/sync_sites.txt as results come. About 1.5 minutes.
# On the GPU machine, from the repo root: bash tests/gpu/check_sync_sites.sh
# DEVICE=cpu: a smoke test of the plumbing (on CPU no call is a GPU sync: tuimon names no site).
source tests/gpu/prelude.sh
DEVICE=${DEVICE:-cuda}
LOG="$OUT/sync_sites.txt"
JOB=tests/workloads/sync_sites.py
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
  python3 -c "import torch; print('torch', torch.__version__)"; } 2>&1 | tee "$LOG"

wait_truth() {  # until the loop's truth file exists (past its warm-up), at most 60 s
  for _ in $(seq 300); do [ -s "$1" ] && return 0; sleep 0.2; done; return 1
}

# 1. under `tuimon run --headless` (it execs the job: its PID is the job's)
echo "=== run: tuimon run --headless, attach --once --json --window 8 after 15 s" | tee -a "$LOG"
T1="$OUT/sync_sites.run.truth.json"; rm -f "$T1"
timeout 120 python3 -m tuimon run --headless -- python3 $JOB --device "$DEVICE" --seconds 90 --truth "$T1" \
  >"$OUT/sync_sites.run.log" 2>&1 &
PID=$!
sleep 15
timeout 60 python3 -m tuimon attach $PID --once --json --window 8 >"$OUT/sync_sites.run.attach.json" \
  2>"$OUT/sync_sites.run.attach.err"
echo "attach rc $?" | tee -a "$LOG"
cp "$T1" "$OUT/sync_sites.run.truth.at_attach.json" 2>/dev/null
kill $PID 2>/dev/null; wait $PID 2>/dev/null
head -3 "$OUT/sync_sites.run.log" | tee -a "$LOG"

# 2. run plainly, `tuimon inject` 10 s in (once its truth is there), attach 12 s later
echo "=== inject: plain run, tuimon inject after 10 s, attach --once --json --window 8 12 s later" | tee -a "$LOG"
T2="$OUT/sync_sites.inject.truth.json"; rm -f "$T2"
timeout 120 python3 $JOB --device "$DEVICE" --seconds 90 --truth "$T2" >"$OUT/sync_sites.inject.log" 2>&1 &
PID=$!
sleep 10; wait_truth "$T2"
timeout 60 python3 -m tuimon inject $PID 2>&1 | tail -3 | tee -a "$LOG"
sleep 12
timeout 60 python3 -m tuimon attach $PID --once --json --window 8 >"$OUT/sync_sites.inject.attach.json" \
  2>"$OUT/sync_sites.inject.attach.err"
echo "attach rc $?" | tee -a "$LOG"
cp "$T2" "$OUT/sync_sites.inject.truth.at_attach.json" 2>/dev/null
kill $PID 2>/dev/null; wait $PID 2>/dev/null

# 3. the table
python3 - "$OUT" <<'EOF' 2>&1 | tee -a "$LOG"
import json, os, sys

out = sys.argv[1]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"error": f"{os.path.basename(path)}: {e}"}


print("tuimon reports a site's syncs per step and its own blocked share of the step (sampled walks: a walked")
print("sync's wait x the syncs it stands for); the loop times each call. 'calls': the site's share of the step's")
print("syncs, tuimon's vs the loop's counts; 'time': tuimon's share of the step blocked at the site (syncs.top[].share;")
print("from a tuimon without it: the blocked share split by calls, marked *), vs the loop's own timer around each")
print("call. Pass: every |diff| <= 0.1.")
verdicts = []
for mode in ("run", "inject"):
    snap = load(os.path.join(out, f"sync_sites.{mode}.attach.json"))
    truth = load(os.path.join(out, f"sync_sites.{mode}.truth.at_attach.json"))
    if "error" in snap or "error" in truth:
        err = open(os.path.join(out, f"sync_sites.{mode}.attach.err")).read()[-400:] if os.path.exists(
            os.path.join(out, f"sync_sites.{mode}.attach.err")) else ""
        print(f"--- {mode}: no result", snap.get("error", ""), truth.get("error", ""), err)
        verdicts.append((mode, "no result"))
        continue
    syncs = snap.get("syncs") or {}
    top = syncs.get("top") or []
    t_per_step = sum(s["per_step"] for s in top) or 0.0
    loop_calls = sum(s["calls_per_step"] for s in truth["sites"].values()) or 1.0
    print(f"--- {mode}: tuimon {snap.get('window_steps')} steps, {(snap.get('step_time_ms') or {}).get('p50')} ms/step (p50), syncs "
          f"{syncs.get('per_step')}/step, blocked {syncs.get('share')}; loop {truth['step_ms']:.1f} ms/step, "
          f"blocked {truth['sync_share']:.3f} ({truth['steps']} steps)")
    print("    tuimon's sites:", ", ".join(f"{s['site']} ({s['per_step']}/step, {s.get('share')} of the step)"
                                     for s in top) or "none")
    print(f"    {'site':<12} {'line':>5} | {'calls: tuimon':>13} {'loop':>6} {'diff':>6} | "
          f"{'time: tuimon':>12} {'loop':>6} {'diff':>6}")
    ok_calls = ok_time = True
    for name, s in truth["sites"].items():
        hit = [x for x in top if x["site"].endswith(f"sync_sites.py:{s['line']}")]
        t_calls = hit[0]["per_step"] / t_per_step if hit and t_per_step else 0.0
        l_calls = s["calls_per_step"] / loop_calls
        own = hit[0].get("share") if hit else None  # (the site's own wait, where tuimon times it)
        t_time = own if own is not None else (syncs.get("share") or 0.0) * t_calls
        d_calls, d_time = t_calls - l_calls, t_time - s["share"]
        ok_calls &= bool(hit) and abs(d_calls) <= 0.1
        ok_time &= bool(hit) and abs(d_time) <= 0.1
        print(f"    {name:<12} {s['line']:>5} | {t_calls:>13.3f} {l_calls:>6.3f} {d_calls:>+6.3f} | "
              f"{t_time:>11.3f}{' ' if own is not None else '*'} {s['share']:>6.3f} {d_time:>+6.3f}"
              f"{'' if hit else '  (not named)'}")
    verdicts.append((mode, f"calls {'PASS' if ok_calls else 'FAIL'}, time {'PASS' if ok_time else 'FAIL'}"))
print("=== issue 43 item 3: both sites named, each within 0.1 of the loop's own share")
for mode, v in verdicts:
    print(f"    {mode:<7} {v}")
EOF
