"""A training loop that regresses mid-run, measuring its own truth. No tuimon import: run it under
`tuimon run`.

    python regressing.py [--seconds S] [--slow-after S] [--slow-by F] [--truth FILE]

Each step: a batch from a DataLoader with 2 workers, a small model's forward, a backward that
waits 10 ms in its autograd function (standing in for kernels), the optimizer, 6 ms of other
work. Waits are sleeps, not spins, so two of these loops and their monitors share a 2-core CI
machine without disturbing each other's step times. With --slow-after S, after S seconds the
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

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        time.sleep(WaitingBackward.ms / 1e3)
        return g


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--slow-after", type=float, default=0, help="0: never")
    ap.add_argument("--slow-by", type=float, default=0.3)
    ap.add_argument("--truth")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    it = iter(DataLoader(Batches(), batch_size=None, num_workers=2, persistent_workers=True))
    start = time.monotonic()
    end, slow_at = start + a.seconds, start + a.slow_after if a.slow_after > 0 else None
    truth = {"slowed_at": None, "steps_before": 0, "ms_before": 0.0, "steps_after": 0, "ms_after": 0.0}
    last_write = 0.0
    print("training", flush=True)
    while time.monotonic() < end:
        t0 = time.perf_counter()
        x, y = next(it)
        loss = nn.functional.mse_loss(WaitingBackward.apply(net(x)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.006)
        ms = (time.perf_counter() - t0) * 1e3
        now = time.monotonic()
        side = "after" if truth["slowed_at"] is not None else "before"
        truth[f"steps_{side}"] += 1
        truth[f"ms_{side}"] += ms
        if slow_at is not None and truth["slowed_at"] is None and now >= slow_at and truth["steps_before"] > 10:
            WaitingBackward.ms += a.slow_by * truth["ms_before"] / truth["steps_before"]
            truth["slowed_at"] = now
            print(f"slowed: backward now waits {WaitingBackward.ms:.1f} ms", flush=True)
        if a.truth and now - last_write >= 0.5:
            last_write = now
            with open(a.truth + ".tmp", "w") as f:
                json.dump(truth, f)
            os.replace(a.truth + ".tmp", a.truth)
    print("finished", flush=True)


if __name__ == "__main__":
    main()
