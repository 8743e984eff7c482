"""What the probe costs a real training step, with a monitor attached (budget: <= 1%).

    python benchmarks/step_overhead.py [--pairs 12] [--block-steps 50] [--device auto] [--model demo|resnet50]

One process trains a model on batches made ahead of time, so the step is the model's own work
and not the input pipeline's: the demo CNN (tuimon/workloads/demo_train.py), or torchvision's
ResNet-50 (161 modules: what the step anatomy's module hooks see on a real model). The probe is
instrumented once, with everything on: ranges, steps, the step anatomy (phases, sync timing,
CUDA events, memory gauges). Blocks of steps then alternate between the probe on and the probe
off (every torch wrapper and hook swapped back to the original, ranges unbound: what a process
without tuimon runs, apart from the annotations it carries), in on-off-off-on order so slow
drifts cancel. `tuimon record` runs beside it the whole time as the attached monitor (channel
drain, NVML, psutil at 1 Hz). The table: median block mean step time with the probe on and off,
their ratio, and the spread of the per-pair ratios.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=12, help="on/off block pairs")
    ap.add_argument("--block-steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--model", default="demo", choices=("demo", "resnet50", "graph-forward"),
                    help="graph-forward: tests/workloads/cuda_graphs.py's forward loop (a captured backbone "
                         "replayed, an eager head; ~0.65 ms host-bound steps on an H200), captured once with "
                         "the probe on, at the warm-up's 20th step; CUDA only. It syncs every 100th step and "
                         "the GPU events come every 100th: give --block-steps a multiple of 100")
    ap.add_argument("--variants", default="", help="probe_ablation.py: only these variants, comma-separated")
    ap.add_argument("--null", action="store_true",
                    help="the probe off in both arms: what the measurement itself reads as a cost (an A/A test)")
    return ap.parse_args()


def training(a):
    """The instrumented process's step: (probe, probe_on(bool), steps(n) -> ms a step, net, batch,
    device, cuda); also used by probe_ablation.py."""
    os.environ.setdefault("TUIMON_SHM_DIR", tempfile.mkdtemp())

    import tuimon
    from tuimon.probe import api, state

    assert tuimon.instrument().enabled
    probe = state.probe

    def probe_on(on: bool):
        api.switch(probe, on)

    import torch
    from torch import nn
    from torch.utils.data import DataLoader

    from tuimon.workloads.demo_train import model

    if a.model == "graph-forward":
        if a.device not in ("auto", "cuda") or not torch.cuda.is_available():
            raise SystemExit("--model graph-forward needs CUDA")
        return graph_forward(probe, probe_on)

    cuda = a.device in ("auto", "cuda") and torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    batch, size, width = (256, 64, 128) if cuda else (32, 32, 16)
    if not cuda:
        torch.set_num_threads(1)
    net = model(width)
    if a.model == "resnet50":
        import torchvision

        net = torchvision.models.resnet50(num_classes=10)
        batch, size = (64, 224) if cuda else (4, 64)
    net = net.to(device)
    g = torch.Generator().manual_seed(0)
    made = [(torch.randn(batch, 3, size, size, generator=g), torch.randint(0, 10, (batch,), generator=g))
            for _ in range(8)]
    if cuda:
        made = [(x.pin_memory(), y.pin_memory()) for x, y in made]

    class Ready(torch.utils.data.Dataset):  # batches made ahead: the step is the model's work
        def __len__(self):
            return 10**9

        def __getitem__(self, i):
            return made[i % len(made)]

    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    batches = iter(DataLoader(Ready(), batch_size=None, num_workers=0))

    def steps(n):
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(n):
            x, y = next(batches)
            with tuimon.range("h2d"):
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with tuimon.range("forward"):
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
                    loss = nn.functional.cross_entropy(net(x), y)
            with tuimon.range("backward"):
                opt.zero_grad(set_to_none=True)
                loss.backward()
            with tuimon.range("optimizer"):
                opt.step()
            if cuda:
                with tuimon.range("sync"):
                    torch.cuda.synchronize()
            tuimon.count("samples", batch)
        steps.cpu_ms = (time.thread_time() - c0) / n * 1e3  # the loop thread's own CPU a step (not its waits)
        return (time.perf_counter() - t0) / n * 1e3

    steps.opt, steps.batches = opt, batches  # (step_segments.py times the same step by its parts)
    return probe, probe_on, steps, net, batch, device, cuda


def graph_forward(probe, probe_on):
    """training()'s answer for --model graph-forward: the step is cuda_graphs.ForwardLoop.step, as
    the workload runs it (no ranges, no DataLoader; a sync every 100 steps)."""
    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "workloads"))
    from cuda_graphs import ForwardLoop

    loop = ForwardLoop(capture_at=20)

    def steps(n):
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(n):
            loop.step()
        steps.cpu_ms = (time.thread_time() - c0) / n * 1e3
        return (time.perf_counter() - t0) / n * 1e3

    steps.opt, steps.batches = loop.opt, None
    return probe, probe_on, steps, loop.head, 256, torch.device("cuda"), True


def main():
    a = args()
    probe, probe_on, steps, net, batch, device, cuda = training(a)
    import torch

    from tuimon.channel import ring
    monitor = subprocess.Popen([sys.executable, "-m", "tuimon", "record", str(os.getpid()), "-o",
                                os.path.join(tempfile.mkdtemp(), "bench.jsonl"), "--interval", "1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        steps(a.warmup)
        on, off, cpu_on, cpu_off = [], [], [], []
        for _ in range(a.pairs):
            for state in (True, False, False, True):
                probe_on(state and not a.null)
                (on if state else off).append(steps(a.block_steps))
                (cpu_on if state else cpu_off).append(steps.cpu_ms)
        probe_on(True)
        alive = monitor.poll() is None
    finally:
        monitor.terminate()
        err = monitor.communicate(timeout=30)[1]
    # each on-off-off-on group gives two pairs
    ratios = [x / y for x, y in zip(on, off, strict=True)]
    m_on, m_off = statistics.median(on), statistics.median(off)
    print(f"{'A/A (probe off in both arms): ' if a.null else ''}device {device}"
          f"{' ' + torch.cuda.get_device_name(0) if cuda else ''}, model {a.model} "
          f"({sum(1 for _ in net.modules())} modules, batch {batch}), hot path {ring.IMPLEMENTATION}, "
          f"{len(on)} blocks of {a.block_steps} steps each way, monitor attached: {alive}")
    if not alive:
        print(f"  the monitor stopped early: {err.strip()[-300:]}")
    print(f"{'':<28}{'ms/step':>10}")
    print(f"{'probe off (median block)':<28}{m_off:>10.3f}")
    print(f"{'probe on (median block)':<28}{m_on:>10.3f}")
    print(f"{'ratio on/off (medians)':<28}{m_on / m_off:>10.4f}")
    q = statistics.quantiles(ratios, n=4)
    print(f"{'per-pair ratio p25..p75':<28}{q[0]:>10.4f} .. {q[2]:.4f}")
    mean, half = mean_ci(ratios)
    print(f"{'per-pair ratio mean, 95% CI':<28}{mean:>10.4f} .. ±{half:.4f}  (total on / total off {sum(on) / sum(off):.4f})")
    c_on, c_off = statistics.median(cpu_on), statistics.median(cpu_off)
    print(f"{'loop thread CPU a step':<28}{c_off:>10.3f} off, {c_on:.3f} on: +{(c_on - c_off) * 1e3:.0f} us of the "
          f"step's +{(m_on - m_off) * 1e3:.0f} us (the rest: waits, for the GIL among them)")
    print(f"records written {probe.writer.records_written}, probe enabled {probe.writer.enabled}, "
          f"forward roots {len(probe.roots.roots) if probe.roots else 0}, GPU timing "
          f"{'every ' + str(probe.gpu.every) + ' step(s)' if probe.gpu else 'off'}")
    probe.writer.unlink()


def mean_ci(xs: list[float]) -> tuple[float, float]:
    """The mean and the half-width of its 95% confidence interval (normal approximation: many pairs)."""
    m = statistics.fmean(xs)
    return m, 1.96 * statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else float("nan")


if __name__ == "__main__":
    main()
