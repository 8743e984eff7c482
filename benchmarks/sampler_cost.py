"""What sampling costs: the NVML device sampler's time per cycle per GPU and the sampling
thread's CPU share at a given interval, beside the calls it must avoid or pay for; on GPM GPUs the
same CPU share again with GPM's reads left out (the coarse-utilization path), one after the other.

    python benchmarks/sampler_cost.py [--seconds 20] [--interval 1.0]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def timed(fn, n=5):
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--interval", type=float, default=1.0)
    a = ap.parse_args()
    from tuimon.sources.nvml import DeviceSampler
    from tuimon.sources.process import ProcessSampler

    s = DeviceSampler()
    if s.error:
        print(f"no NVML here: {s.error}")
        return
    import pynvml as nvml

    n = len(s.devices)
    h = s._handles[0]
    print(f"{n} GPU(s): {', '.join(str(d['name']) for d in s.devices)}; GPM: {[d['gpm'] for d in s.devices]}")
    rows = [("nvmlDeviceGetPcieThroughput (never polled)", timed(lambda: nvml.nvmlDeviceGetPcieThroughput(h, 0))),
            ("nvmlDeviceGetPowerUsage", timed(lambda: nvml.nvmlDeviceGetPowerUsage(h)))]
    if s.devices[0]["gpm"]:
        smp = nvml.nvmlGpmSampleAlloc()
        rows.append(("nvmlGpmSampleGet", timed(lambda: nvml.nvmlGpmSampleGet(h, smp))))
    s.sample()
    rows.append(("DeviceSampler.sample(), all GPUs", timed(s.sample)))
    procs = ProcessSampler(os.getpid())
    rows.append(("ProcessSampler.sample()", timed(procs.sample)))

    per_call = _per_call_costs(s)

    cpu_pct, cycle_ms = _sampling_cpu(procs, s, a)
    gpm_off = None
    if any(d.get("gpm") for d in s.devices):  # the same sampling with GPM's reads left out (coarse utilization)
        s_off = DeviceSampler()
        for d in s_off.devices:
            d["gpm"] = False
        gpm_off = _sampling_cpu(procs, s_off, a)
        s_off.close()
    print(f"{'call':<46}{'ms':>9}")
    for name, ms in rows:
        print(f"{name:<46}{ms:>9.2f}")
    print(f"{'one cycle, process tree + all GPUs (mean)':<46}{cycle_ms:>9.2f}")
    print("inside DeviceSampler.sample(), per NVML function, ms per cycle:")
    for name, ms in per_call:
        print(f"  {name:<44}{ms:>9.3f}")
    print(f"{'sampling CPU % of one core at ' + str(a.interval) + ' s':<46}{cpu_pct:>9.2f}")
    if gpm_off:
        print(f"{'  the same with GPM off: one cycle ms':<46}{gpm_off[1]:>9.2f}")
        print(f"{'  the same with GPM off: CPU % of one core':<46}{gpm_off[0]:>9.2f}")
    s.close()


def _sampling_cpu(procs, sampler, a) -> tuple[float, float]:
    """The process's CPU % of one core while a Poller samples the process tree and the GPUs every
    a.interval s for a.seconds, and the mean cycle in ms."""
    from tuimon.sources.poller import Poller

    sampler.sample()
    cpu0, wall0 = time.process_time(), time.monotonic()
    poller = Poller(lambda: (procs.sample(), sampler.sample()), lambda r: None, a.interval).start()
    time.sleep(a.seconds)
    poller.stop()
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    return 100 * cpu / wall, poller.busy_s / max(poller.cycles, 1) * 1e3


def _per_call_costs(sampler, cycles: int = 20) -> list[tuple[str, float]]:
    """Where DeviceSampler.sample()'s time goes: every nvml function it calls, timed."""
    real = sampler.nvml
    spent: dict[str, float] = {}

    class Timed:
        def __getattr__(self, name):
            fn = getattr(real, name)
            if not callable(fn) or not name.startswith("nvml"):
                return fn

            def timed(*args, **kwargs):
                t = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    spent[name] = spent.get(name, 0.0) + time.perf_counter() - t

            return timed

    sampler.nvml = Timed()
    try:
        for _ in range(cycles):
            sampler.sample()
            time.sleep(0.05)
    finally:
        sampler.nvml = real
    return sorted(((k, v / cycles * 1e3) for k, v in spent.items()), key=lambda kv: -kv[1])


if __name__ == "__main__":
    main()
