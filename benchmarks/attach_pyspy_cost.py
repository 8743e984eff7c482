"""What sampling a job from outside (py-spy, `tuimon attach` without the probe) costs the job: its
own step times in blocks with the outside sampler off and on, side by side in one run, and what
py-spy costs the monitor's side (CPU of a core).

    python benchmarks/attach_pyspy_cost.py [--device cpu|cuda] [--pairs 6] [--block-s 10]
                                           [--modes nonblocking,blocking]

The job is a real training loop started without tuimon (an MLP, SGD, loss.item() each step, a
little Python bookkeeping) that logs each step's time by its own timer. Blocks rotate through off
and each mode, the order shifted every round so drift on a shared machine spreads over all; a
block's first 0.5 s is left out. Prints a table last: per mode, the median step time on and off
and their ratio (median over rounds, with p25..p75), py-spy's CPU, and the samples it read.
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

JOB = r'''
import sys, time, torch
from torch import nn
log, device, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 256)).to(device)
opt = torch.optim.SGD(net.parameters(), lr=1e-3)
if device == "cpu":  # a step of ~10 ms on one core: steadier beside other work than one that fights for all
    torch.set_num_threads(1)
    x, y = torch.randn(64, 256), torch.randn(64, 256)
else:  # a GPU step of a few ms: enough kernels that the host's part is real
    x, y = torch.randn(16384, 256, device=device), torch.randn(16384, 256, device=device)
metrics, out, end = {}, open(log, "w", buffering=1 << 16), time.monotonic() + seconds
last_flush = time.monotonic()
while time.monotonic() < end:
    t0 = time.perf_counter()
    loss = nn.functional.mse_loss(net(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    metrics["loss"] = loss.item()  # (a sync on the GPU: the step's time is the GPU's too)
    metrics["norm"] = sum(float(p.grad.abs().sum()) for p in list(net.parameters())[:1])
    ms = 1e3 * (time.perf_counter() - t0)
    out.write(f"{time.monotonic():.6f} {ms:.4f}\n")
    if time.monotonic() - last_flush > 0.2:
        out.flush()
        last_flush = time.monotonic()
out.close()
'''


def steps_between(log: str, t0: float, t1: float) -> list[float]:
    out = []
    with open(log) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                t, ms = float(parts[0]), float(parts[1])
                if t0 <= t < t1:
                    out.append(ms)
    return out


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--pairs", type=int, default=6, help="rounds of blocks (off and each mode)")
    ap.add_argument("--block-s", type=float, default=10.0)
    ap.add_argument("--warmup-s", type=float, default=8.0)
    ap.add_argument("--modes", default="nonblocking", help="comma-separated: nonblocking, blocking")
    a = ap.parse_args()
    from tuimon.sources.pyspy import FIRST_ROUND_S, RATE_HZ, ROUND_S, OutsideSampler, find_pyspy

    exe = find_pyspy()
    if exe is None:
        print("py-spy is not installed here (pip install py-spy)")
        return 2
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    kinds = ["off", *modes]
    seconds = a.warmup_s + a.pairs * len(kinds) * (a.block_s + 1.0) + 30
    tmp = tempfile.mkdtemp(prefix="tuimon-attach-cost-")
    log = os.path.join(tmp, "steps.log")
    job = subprocess.Popen([sys.executable, "-c", JOB, log, a.device, str(seconds)])
    print(f"job PID {job.pid} on {a.device}; py-spy {exe}; {RATE_HZ} Hz, rounds of {FIRST_ROUND_S} s then {ROUND_S} s; "
          f"{a.pairs} rounds of {kinds}, {a.block_s:g} s each", flush=True)
    blocks: dict[str, list[float]] = {k: [] for k in kinds}  # median step ms per block
    ratios: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    samples: dict[str, list[int]] = {m: [] for m in modes}
    try:
        time.sleep(a.warmup_s)
        for r in range(a.pairs):
            order = kinds[r % len(kinds):] + kinds[: r % len(kinds)]
            medians = {}
            for kind in order:
                sampler, c0, t0 = None, children_cpu(), time.monotonic()
                if kind != "off":
                    sampler = OutsideSampler(job.pid, nonblocking=kind == "nonblocking", exe=exe).start()
                time.sleep(a.block_s)
                t1 = time.monotonic()
                if sampler is not None:
                    got = sampler.latest()
                    sampler.stop()
                    samples[kind].append(got.samples)
                    cpu[kind].append(100 * (children_cpu() - c0) / (t1 - t0))
                time.sleep(0.5)  # (the job's log is flushed every 0.2 s)
                ms = steps_between(log, t0 + 0.5, t1)
                medians[kind] = statistics.median(ms) if ms else float("nan")
                blocks[kind].append(medians[kind])
            line = "  ".join(f"{k} {medians[k]:.3f} ms" for k in kinds)
            for m in modes:
                ratios[m].append(medians[m] / medians["off"])
            print(f"round {r + 1}: {line}", flush=True)
    finally:
        job.kill()
        job.wait()
    print()
    print(f"{'sampler':<14}{'step ms off':>12}{'step ms on':>12}{'on/off':>9}{'p25..p75':>16}"
          f"{'py-spy CPU % core':>19}{'samples/block':>15}")
    off = statistics.median(blocks["off"])
    for m in modes:
        q = statistics.quantiles(ratios[m], n=4) if len(ratios[m]) >= 2 else [ratios[m][0]] * 3
        print(f"{m:<14}{off:>12.3f}{statistics.median(blocks[m]):>12.3f}{statistics.median(ratios[m]):>9.4f}"
              f"{f'{q[0]:.4f}..{q[2]:.4f}':>16}{statistics.median(cpu[m]):>19.2f}{statistics.median(samples[m]):>15.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
