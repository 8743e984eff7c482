"""What each part of the probe costs a real training step: the probe on (with one part off) against
the probe off, for each part in turn (budget: all of it <= 1%).

    python benchmarks/probe_ablation.py [--pairs 12] [--block-steps 50] [--device auto] [--model demo|resnet50]

The step and the attached monitor are benchmarks/step_overhead.py's. Each round runs, for each
variant (all on; without GPU timing; without the copy accounting; without the op counter; without
the line sampler), blocks of steps with the probe on in that variant and off, in on-off-off-on
order; the table: each variant's median ratio on/off and its p25..p75. A part costs about the
difference between "all on" and the variant without it (within the spread)."""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=12, help="on/off block pairs")
    ap.add_argument("--block-steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--model", default="demo", choices=("demo", "resnet50"))
    a = ap.parse_args()
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
        t0 = time.perf_counter()
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
        return (time.perf_counter() - t0) / n * 1e3

    monitor = subprocess.Popen([sys.executable, "-m", "tuimon", "record", str(os.getpid()), "-o",
                                os.path.join(tempfile.mkdtemp(), "bench.jsonl"), "--interval", "1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    full = {"gpu": probe.gpu, "copies": probe.copies, "ops": probe.ops}

    def variant(name):
        for k, v in full.items():
            setattr(probe, k, v)
        if probe.sampler is not None:
            probe.sampler.pause(False)
        if name == "no gpu timing":
            probe.gpu = None
        elif name == "no copies":
            probe.copies = None
        elif name == "no op counter":
            probe.ops = None
        elif name == "no sampler" and probe.sampler is not None:
            probe.sampler.pause(True)

    names = ["all on", "no gpu timing", "no copies", "no op counter", "no sampler"]
    ratios = {n: [] for n in names}
    try:
        steps(a.warmup)
        for _ in range(a.pairs):
            for n in names:
                on = off = 0.0
                for st in (True, False, False, True):
                    probe_on(st)
                    if st:
                        variant(n)
                    ms = steps(a.block_steps)
                    if st:
                        on += ms
                    else:
                        off += ms
                ratios[n].append(on / off)
        probe_on(True)
        variant("all on")
    finally:
        monitor.terminate()
        monitor.communicate(timeout=30)
    print(f"device {device}, model {a.model}, {a.pairs} rounds; each: probe on (the variant) / off, on-off-off-on")
    for n in names:
        q = statistics.quantiles(ratios[n], n=4)
        print(f"{n:<16} median {statistics.median(ratios[n]):.4f}  p25..p75 {q[0]:.4f} .. {q[2]:.4f}")
    probe.writer.unlink()


if __name__ == "__main__":
    main()
