#!/usr/bin/env bash
# The monitor's own cost on a real GPU job, beside nvitop: what one PSS read (smaps_rollup) of the
# job's processes costs, and `tuimon attach` / `tuimon top` / nvitop in a pseudo-terminal at 1 Hz.
# Needs nvitop carried as a wheel. On the GPU machine: source .gpu/activate.sh; bash tests/gpu/check_monitor_cost.sh
source tests/gpu/prelude.sh
python3 -m compileall -q /tmp/site tuimon >/dev/null 2>&1  # (or the first frame measures compiling)
python3 -m tuimon run --headless -- python3 -m tuimon.workloads.demo_train --seconds 300 > "$OUT/demo.log" 2>&1 &
JOB=$!; sleep ${WARM:-20}
echo "=== one PSS read (/proc/PID/smaps_rollup) of each of the job's processes"
python3 - $JOB <<'PY'
import sys, time, psutil
from tuimon.sources.process import PSS_EVERY_S, _read_pss
job = psutil.Process(int(sys.argv[1]))
for p in [job, *job.children(recursive=True)]:
    t = time.perf_counter()
    for _ in range(10):
        pss = _read_pss(p)
    ms = (time.perf_counter() - t) / 10 * 1e3
    print(f"{p.pid} {p.name():<16} RSS {p.memory_info().rss / 2**20:8.1f} MiB  PSS {pss / 2**20:8.1f} MiB  {ms:6.2f} ms a read"
          f"  -> {100 * ms / 1e3 / PSS_EVERY_S:.3f}% of a core at one read per {PSS_EVERY_S:g} s")
PY
echo "=== the monitor beside nvitop, same job"
python3 benchmarks/ui_budget.py --seconds ${SECONDS_EACH:-30} --warmup 3 \
  --run "tuimon attach (live)=python3 -m tuimon attach $JOB --interval 1" \
  --run "nvitop=python3 -m nvitop --interval 1" \
  --run "tuimon top=python3 -m tuimon top --interval 1" \
  --run "tuimon attach, again=python3 -m tuimon attach $JOB --interval 1" 2>&1 | tee "$OUT/ui_budget.txt" | tail -7
kill $JOB 2>/dev/null; wait $JOB 2>/dev/null
