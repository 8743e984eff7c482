#!/usr/bin/env bash
# Issue 10: where does an nsys window's cost come from, and does lowering nsys's CPU priority help?
# A steady GPU loop logging every step (regressing.py, ~13 ms) under `tuimon run --headless --nsys`;
# tests/gpu/cpu_sampler.py records every process's and the job's threads' CPU every 0.25 s.
# Windows 1-3 as tuimon runs them; windows 4-6 with every nsys process (not the job) set to
# SCHED_IDLE + nice 19 while it lives. Then two jobs under nsys at once (separate sessions), one with
# --gpu-metrics-devices=all: both windows at once, their reports, nsys's GPU metrics rows in the
# window, tuimon's GPM readings of that GPU meanwhile. Needs .libdw carried. Table last.
source tests/gpu/prelude.sh
W=tests/workloads/regressing.py
L=$(mktemp -d)
export TUIMON_CAPTURE_DIR=$L/captures
now() { python3 -c "import time; print(time.monotonic())"; }
stamp() { python3 -c 'import sys, time
for line in sys.stdin: print(f"{time.monotonic():.4f} {line}", end="", flush=True)'; }
# (NSYS_ARGS: --nsys-args for job 1; IDLE_FROM=7: no idle windows; PAIR=0: no second part)
python3 -m tuimon run --headless --nsys ${NSYS_ARGS:+--nsys-args="$NSYS_ARGS"} -- python3 $W --device cuda --seconds 150 \
  --step-log "$L/steps.txt" > "$L/job.log" 2>&1 &
JOB=$!
python3 tests/gpu/cpu_sampler.py "$L/cpu.jsonl" --job-pattern "$W" --seconds 170 &
SAMPLER=$!
idle_nsys() {  # every nsys process but the job's: SCHED_IDLE and nice 19, on every thread, as they come
  python3 - <<'PY'
import os, time
end = time.monotonic() + 60
while time.monotonic() < end and not os.path.exists(os.environ["STOPFILE"]):
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0].decode()
        except OSError:
            continue
        if "nsight" not in exe.lower() and "nsys" not in os.path.basename(exe) or "python" in os.path.basename(cmd):
            continue
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                os.sched_setscheduler(int(tid), os.SCHED_IDLE, os.sched_param(0))
                os.setpriority(os.PRIO_PROCESS, int(tid), 19)
            except OSError:
                pass
    time.sleep(0.2)
PY
}
sleep 30
for i in 1 2 3 4 5 6; do
  if [ $i -ge ${IDLE_FROM:-4} ]; then STOPFILE=$L/stop$i idle_nsys & IDLER=$!; fi
  echo "$(now)" > "$L/cap$i.t0"
  python3 -m tuimon capture $JOB --steps 20 --wait --timeout 120 2>&1 | stamp > "$L/cap$i.stamped"
  echo "$(now)" > "$L/cap$i.t1"
  sleep 6
  if [ $i -ge ${IDLE_FROM:-4} ]; then touch "$L/stop$i"; wait $IDLER; fi
done
ps -eo pid,ppid,ni,cls,pcpu,args | grep -i "[n]sys\|[Q]dstrm" | cut -c1-150 > "$L/nsys_procs.txt"
wait $JOB; echo "job 1 exited $?"
kill $SAMPLER 2>/dev/null

# two jobs under nsys at once; B also asks nsys for GPU metrics
if [ "${PAIR:-1}" = 1 ]; then
python3 -m tuimon run --headless --nsys -- python3 $W --device cuda --seconds 60 > "$L/jobA.log" 2>&1 &
A=$!
python3 -m tuimon run --headless --nsys --nsys-args="--gpu-metrics-devices=all" -- python3 $W --device cuda --seconds 60 \
  > "$L/jobB.log" 2>&1 &
B=$!
sleep 25
nsys sessions list > "$L/sessions_during.txt" 2>&1
python3 -m tuimon attach $B --plain 2>&1 | stamp > "$L/attachB.txt" &
ATT=$!
python3 -m tuimon capture $A --steps 40 --wait --timeout 120 2>&1 | stamp > "$L/capA.txt" &
CA=$!
python3 -m tuimon capture $B --steps 40 --wait --timeout 120 2>&1 | stamp > "$L/capB.txt" &
CB=$!
for _ in $(seq 100); do grep -q "writing:" "$L/capB.txt" 2>/dev/null && break; sleep 0.1; done
python3 -m tuimon capture $B --steps 10 > "$L/capB_second.txt" 2>&1  # from another tuimon while B's report is written
echo "rc $?" >> "$L/capB_second.txt"
wait $CA $CB
sleep 8
kill $ATT 2>/dev/null
wait $A $B
sleep 2
ps -eo pid,args | grep -i "[n]sys \|[Q]dstrm" | cut -c1-120 > "$L/left.txt"
nsys sessions list > "$L/sessions_after.txt" 2>&1
ls /tmp | grep -i nsys > "$L/tmp_left.txt"
for c in A B; do
  rep=$(grep -o '/[^ ]*\.nsys-rep' "$L/cap$c.txt" | head -1)
  echo "$rep" > "$L/rep$c.txt"
  [ -n "$rep" ] && nsys export --type sqlite --force-overwrite=true -o "$L/rep$c.sqlite" "$rep" > /dev/null 2>&1
done
fi
python3 tests/gpu/explore_nsys_stop_cost_table.py "$L" | tee "$OUT/table.txt"
tar -C "$L" -czf "$OUT/logs.tgz" --exclude='*.nsys-rep' --exclude='*.sqlite' --exclude='*.qdstrm' . 2>/dev/null
