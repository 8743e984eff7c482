"""What each call the probe wraps costs the host, in microseconds, probe on against probe off
(the budget for all of them together: 1% of a step; a 10 ms step has 100 us).

    python benchmarks/probe_calls.py [--calls 2000] [--rounds 7] [--device auto]

In one process, instrumented once: each call is run `calls` times with the probe on and off
(api.switch: every wrapper and hook swapped back, as in a process without tuimon), in on-off-off-on
order, `rounds` times; the table: per call, the median extra host time of one call with the probe on,
and its p25..p75 over the rounds. The calls are those of one training step (a batch from a
DataLoader, two host-to-device copies, the model's call, backward, an optimizer step that ends the
step, a sync, a range and a count), on a model too small for the GPU to matter: host time only. The
step row runs them together as one step (with the op counter's counted steps, one in `every`, in it;
the other rows leave a counted step out). Where the step of a real job goes to the GPU, only the
part of this on the host's critical path costs it time (benchmarks/step_overhead.py measures that)."""

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


STEP = "one step of all of them"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--device", default="auto")
    a = ap.parse_args()
    os.environ.setdefault("TUIMON_SHM_DIR", tempfile.mkdtemp())

    import tuimon
    from tuimon.probe import api, state

    assert tuimon.instrument().enabled
    probe = state.probe
    import torch
    from torch import nn
    from torch.utils.data import DataLoader

    cuda = a.device in ("auto", "cuda") and torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    torch.set_num_threads(1)
    net = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1)).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    host = torch.randn(8, 16)
    if cuda:
        host = host.pin_memory()
    x = host.to(dev)
    batches = iter(DataLoader(list(range(10**7)), batch_size=None, num_workers=0))
    scalar = torch.ones((), device=dev)

    def backward():
        net(x).sum().backward()  # (the graph's build is the same on and off)

    def ranged():
        with tuimon.range("r"):
            pass

    def step():
        next(batches)
        with tuimon.range("h2d"):
            xb = host.to(dev, non_blocking=True)
            host.to(dev, non_blocking=True)
        loss = net(xb).sum()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        loss.item()
        tuimon.count("samples", 8)

    calls = {
        "next(DataLoader iterator)": lambda: next(batches),
        "tensor.to(device) (host to GPU)" if cuda else "tensor.to(dtype)": (
            (lambda: host.to(dev, non_blocking=True)) if cuda else (lambda: host.to(torch.float64))),
        "model(x) (a root module)": lambda: net(x),
        "loss.backward() (minus graph)": backward,
        "optimizer.step() (a step ends)": opt.step,
        "tensor.item() (a sync)": scalar.item,
        "with tuimon.range(...)": ranged,
        "tuimon.count(...)": lambda: tuimon.count("samples", 8),
        STEP: step,
    }
    if cuda:
        calls["torch.cuda.synchronize()"] = torch.cuda.synchronize

    def timed(fn, n):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        return (time.perf_counter_ns() - t0) / n / 1e3

    for _ in range(200):  # the loop's first steps: module discovery ends, GPU timing and op counts settle
        step()
    extra = {name: [] for name in calls}
    for _ in range(a.rounds):
        for name, fn in calls.items():
            us = {True: 0.0, False: 0.0}
            for on in (True, False, False, True):
                api.switch(probe, on)
                if on and probe.ops is not None and probe.ops.mode is not None and name != STEP:
                    probe.ops.abandon()  # (a step counted by the op counter, left open by the step rows: not this call's cost)
                us[on] += timed(fn, a.calls)
            extra[name].append((us[True] - us[False]) / 2)
    api.switch(probe, True)
    print(f"device {dev}{' ' + torch.cuda.get_device_name(0) if cuda else ''}, torch {torch.__version__}, "
          f"{a.rounds} rounds of {a.calls} calls each way")
    print(f"{'call':<36}{'extra us/call':>14}{'p25..p75':>20}")
    for name, xs in extra.items():
        q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
        print(f"{name:<36}{statistics.median(xs):>14.2f}{f'{q[0]:.2f}..{q[2]:.2f}':>20}")
    probe.writer.unlink()


if __name__ == "__main__":
    main()
