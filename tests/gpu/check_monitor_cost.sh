#!/usr/bin/env bash
# The monitor's own cost on a real GPU job, beside nvitop: what one PSS read (smaps_rollup) of the
# job's processes costs, NVML's start, and `tuimon attach` beside nvitop, each in a pseudo-terminal
# at 1 Hz (benchmarks/monitor_cost.py). Needs nvitop and pyte carried as wheels: here,
# bash .gpu/fetch-wheels.sh nvitop pyte wcwidth; on the GPU machine (carry .gpu, .whl):
# source .gpu/activate.sh; bash tests/gpu/check_monitor_cost.sh
source tests/gpu/prelude.sh
python3 -m compileall -q /tmp/site tuimon >/dev/null 2>&1  # (or the first frame measures compiling)
python3 -m tuimon run --headless -- python3 -m tuimon.workloads.demo_train --seconds 300 > "$OUT/demo.log" 2>&1 &
JOB=$!; sleep ${WARM:-20}
echo "=== one PSS read (psutil memory_full_info: /proc/PID/smaps_rollup) of each of the job's processes"
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
echo "=== NVML's start and first reads in the monitor (what the first frame waits for; overlapped with the UI's imports)"
python3 - <<'PY'
import time
t0 = time.perf_counter()
from tuimon.sources.nvml import DeviceSampler
t1 = time.perf_counter(); d = DeviceSampler(); t2 = time.perf_counter(); d.sample(); t3 = time.perf_counter(); d.sample()
t4 = time.perf_counter()
print(f"import {1e3*(t1-t0):.0f} ms, DeviceSampler() {1e3*(t2-t1):.0f} ms, first sample {1e3*(t3-t2):.0f} ms, "
      f"second {1e3*(t4-t3):.0f} ms, error: {d.error}")
PY
echo "=== the monitor's memory by part: one process importing and starting what attach does, in order"
python3 - <<'PY'
import time, psutil
p = psutil.Process()
def rss(label): print(f"{p.memory_info().rss / 2**20:6.1f} MB  {label}", flush=True)
rss("python")
import pynvml; rss("import pynvml")
pynvml.nvmlInit(); rss("nvmlInit()")
pynvml.nvmlShutdown()
from tuimon.sources.nvml import DeviceSampler
d = DeviceSampler()
for _ in range(5):
    d.sample(); time.sleep(0.2)
rss("tuimon's NVML sampler, 5 samples (GPM)")
import textual.app; rss("import textual.app")
import tuimon.ui.app; rss("import tuimon.ui.app")
PY
echo "=== the monitor beside nvitop, same job: first frames alternating, then both at once"
python3 benchmarks/monitor_cost.py --pid $JOB --seconds ${SECONDS_EACH:-60} --starts ${STARTS:-3} 2>&1 | tee "$OUT/monitor_cost.txt" | tail -8
kill $JOB 2>/dev/null; wait $JOB 2>/dev/null
