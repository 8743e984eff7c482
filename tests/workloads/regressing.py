"""A training loop that regresses mid-run, measuring its own truth. No tuimon import: run it under
`tuimon run`.

    python regressing.py [--seconds S] [--slow-after S] [--slow-by F] [--truth FILE] [--device cpu|cuda]

Each step: a batch from a DataLoader with 2 workers, a small model's forward, a backward that
spends 10 ms in its autograd function, the optimizer, 6 ms of other work, and loss.item(). On
the CPU the backward's 10 ms is a sleep, not a spin, so two of these loops and their monitors
share a 2-core CI machine without disturbing each other's step times; on CUDA it is bf16 8192x8192
matmuls (as many as take 10 ms, measured at start). With --slow-after S, after S seconds the
backward takes F (default 0.3) times the mean step so far longer: the step slows by F.

The truth file (JSON, rewritten every 0.5 s): steps, mean step ms before and after the slowdown,
and when it happened (CLOCK_MONOTONIC s, the clock every process on the machine shares).
"""

import argparse
import json
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Batches(Dataset):
    def __len__(self):
        return 10**9

    def __getitem__(self, i):
        return torch.randn(32, 64), torch.randn(32, 1)


class WaitingBackward(torch.autograd.Function):
    ms = 10.0
    gpu = None  # on CUDA: (a, out, ms of one matmul)

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        if WaitingBackward.gpu is None:
            time.sleep(WaitingBackward.ms / 1e3)
        else:
            a, out, one_ms = WaitingBackward.gpu
            for _ in range(max(1, round(WaitingBackward.ms / one_ms))):
                torch.mm(a, a, out=out)
        return g


def calibrate_gpu(dev) -> None:
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    out = torch.empty_like(a)
    for _ in range(5):
        torch.mm(a, a, out=out)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(20):
        torch.mm(a, a, out=out)
    e1.record()
    e1.synchronize()
    WaitingBackward.gpu = (a, out, e0.elapsed_time(e1) / 20)
    print(f"one 8192^2 bf16 matmul: {WaitingBackward.gpu[2]:.3f} ms", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--slow-after", type=float, default=0, help="0: never")
    ap.add_argument("--slow-by", type=float, default=0.3)
    ap.add_argument("--truth")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--step-log", help="every step's end (CLOCK_MONOTONIC s) and time (ms), a line each")
    a = ap.parse_args()
    step_log = open(a.step_log, "w", buffering=1 << 16) if a.step_log else None
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        calibrate_gpu(dev)
    net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    it = iter(DataLoader(Batches(), batch_size=None, num_workers=2, persistent_workers=True))
    start = time.monotonic()
    end, slow_at = start + a.seconds, start + a.slow_after if a.slow_after > 0 else None
    truth = {"slowed_at": None, "steps_before": 0, "ms_before": 0.0, "steps_after": 0, "ms_after": 0.0}
    last_write = 0.0
    print("training", flush=True)
    t0 = time.perf_counter()
    while time.monotonic() < end:
        x, y = next(it)
        x, y = x.to(dev), y.to(dev)
        loss = nn.functional.mse_loss(WaitingBackward.apply(net(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.006)
        loss.item()  # the step ends when its work has (the loop's timer is the truth)
        t1 = time.perf_counter()  # steps run end to end: the writes below count, as a monitor sees them
        ms, t0 = (t1 - t0) * 1e3, t1
        now = time.monotonic()
        if step_log is not None:
            step_log.write(f"{now:.4f} {ms:.3f}\n")
        side = "after" if truth["slowed_at"] is not None else "before"
        truth[f"steps_{side}"] += 1
        truth[f"ms_{side}"] += ms
        if slow_at is not None and truth["slowed_at"] is None and now >= slow_at and truth["steps_before"] > 10:
            WaitingBackward.ms += a.slow_by * truth["ms_before"] / truth["steps_before"]
            truth["slowed_at"] = now
            print(f"slowed: backward now waits {WaitingBackward.ms:.1f} ms", flush=True)
        if now - last_write >= 0.5:
            last_write = now
            if step_log is not None:
                step_log.flush()
            if a.truth:
                with open(a.truth + ".tmp", "w") as f:
                    json.dump(truth, f)
                os.replace(a.truth + ".tmp", a.truth)
    if step_log is not None:
        step_log.close()
    print("finished", flush=True)


if __name__ == "__main__":
    main()
