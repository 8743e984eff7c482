"""What sampling costs: the NVML device sampler's time per cycle per GPU and the sampling
thread's CPU share at a given interval, beside the calls it must avoid or pay for.

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
    from tuimon.sources.poller import Poller
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

    cpu0, wall0 = time.process_time(), time.monotonic()
    poller = Poller(lambda: (procs.sample(), s.sample()), lambda r: None, a.interval).start()
    time.sleep(a.seconds)
    poller.stop()
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    print(f"{'call':<46}{'ms':>9}")
    for name, ms in rows:
        print(f"{name:<46}{ms:>9.2f}")
    print(f"{'one cycle, process tree + all GPUs (mean)':<46}{poller.busy_s / poller.cycles * 1e3:>9.2f}")
    print("inside DeviceSampler.sample(), per NVML function, ms per cycle:")
    for name, ms in per_call:
        print(f"  {name:<44}{ms:>9.3f}")
    print(f"{'sampling CPU % of one core at ' + str(a.interval) + ' s':<46}{100 * cpu / wall:>9.2f}")
    s.close()


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
