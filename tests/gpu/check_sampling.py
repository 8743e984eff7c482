"""The NVML sampler against known workloads on a real GPU (issue 3). Prints a table last.

    python tests/gpu/check_sampling.py [OUT_DIR]

Phases, each on GPU 0 with the sampler at 1 Hz on its own thread: idle; a bf16 matmul loop
(expect GPM SM activity >= 90%, tensor activity high); a large device-to-device copy loop (expect
DRAM bandwidth >= 70%). During the matmul phase, power and memory are compared with nvidia-smi
taken at the same moment, and the workload's PID must show among the GPU's processes.
"""

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tuimon.model import num  # noqa: E402
from tuimon.sources.nvml import DeviceSampler  # noqa: E402
from tuimon.sources.poller import Poller  # noqa: E402

WORK = """
import sys, time, torch
kind, seconds = sys.argv[1], float(sys.argv[2])
if kind == "matmul":
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
    keep = torch.empty(4 * 2**30, dtype=torch.uint8, device="cuda")  # 4 GiB held, for the memory check
    op = lambda: a @ b
else:
    src = torch.empty(4 * 2**30, dtype=torch.uint8, device="cuda"); dst = torch.empty_like(src)
    op = lambda: dst.copy_(src)
torch.cuda.synchronize(); print("running", flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end:
    for _ in range(20):
        op()
    torch.cuda.synchronize()
"""


def smi():
    out = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=power.draw,memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    p, m = out.strip().split(",")
    return float(p), float(m) * 2**20


def phase(name, sampler, seconds, work=None):
    samples = []
    poller = Poller(sampler.sample, samples.append, 1.0)
    proc = None
    if work:
        proc = subprocess.Popen([sys.executable, "-c", WORK, work, str(seconds + 2)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "running"
        sampler.target_pids = {proc.pid}
    poller.start()
    time.sleep(seconds / 2)
    compare = None
    if work == "matmul":
        s0 = sampler.sample()[0]
        p_smi, m_smi = smi()
        compare = (s0.power_w, p_smi, s0.mem_used, m_smi, s0.uses_target, s0.processes)
    time.sleep(seconds / 2)
    poller.stop()
    if proc:
        proc.wait()
    steady = [s[0] for s in samples[3:]]  # past the first GPM interval and ramp-up

    def mean(field):
        vals = [num(getattr(s, field)) for s in steady if num(getattr(s, field)) is not None]
        return round(sum(vals) / len(vals), 1) if vals else None

    return {"phase": name, "samples": len(steady), **{f: mean(f) for f in (
        "sm_active", "sm_occupancy", "tensor_active", "fp32_active", "dram_bw", "power_w", "sm_clock_mhz")},
        "clock_events": sorted({e for s in steady if isinstance(s.clock_events, list) for e in s.clock_events})}, compare


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp"
    sampler = DeviceSampler()
    if sampler.error:
        print(f"skipped: {sampler.error}")
        return
    print("devices:", json.dumps(sampler.devices, default=str))
    results = []
    r, _ = phase("idle", sampler, 8)
    results.append(r)
    r, cmp = phase("bf16 matmul", sampler, 14, "matmul")
    results.append(r)
    r, _ = phase("d2d copy", sampler, 14, "copy")
    results.append(r)
    with open(os.path.join(out_dir, "sampling_phases.json"), "w") as f:
        json.dump({"results": results, "compare": cmp}, f, indent=1, default=str)
    print()
    print(f"{'phase':<14}{'n':>3}{'SM act%':>9}{'occup%':>8}{'tensor%':>9}{'DRAM%':>7}{'W':>7}{'MHz':>7}  clock events")
    for r in results:
        print(f"{r['phase']:<14}{r['samples']:>3}{r['sm_active']!s:>9}{r['sm_occupancy']!s:>8}{r['tensor_active']!s:>9}"
              f"{r['dram_bw']!s:>7}{r['power_w']!s:>7}{r['sm_clock_mhz']!s:>7}  {', '.join(r['clock_events'])}")
    pw, psmi, mem, msmi, found, procs = cmp
    print(f"power  tuimon {pw:.1f} W  nvidia-smi {psmi:.1f} W  diff {100 * abs(pw - psmi) / psmi:.2f}%")
    print(f"memory tuimon {mem / 2**20:.0f} MiB  nvidia-smi {msmi / 2**20:.0f} MiB  diff {100 * abs(mem - msmi) / msmi:.2f}%")
    print(f"workload PID among the GPU's processes: {found} ({procs})")
    checks = [
        ("matmul SM activity >= 90%", (results[1]["sm_active"] or 0) >= 90),
        ("matmul tensor activity high (>= 50%)", (results[1]["tensor_active"] or 0) >= 50),
        ("copy DRAM bandwidth >= 70%", (results[2]["dram_bw"] or 0) >= 70),
        ("idle SM activity and DRAM near 0 (< 5%)", (results[0]["sm_active"] or 0) < 5 and (results[0]["dram_bw"] or 0) < 5),
        ("power within 5% of nvidia-smi", abs(pw - psmi) / psmi <= 0.05),
        ("memory within 5% of nvidia-smi", abs(mem - msmi) / msmi <= 0.05),
        ("per-process view finds the workload", bool(found)),
    ]
    print()
    for what, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {what}")
    sampler.close()
    sys.exit(0 if all(ok for _, ok in checks) else 1)


if __name__ == "__main__":
    main()
