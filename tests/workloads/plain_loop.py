"""A CPU training loop with a planted anatomy, started plainly (no tuimon anywhere in its environment):
what `tuimon inject` is tested on. It times itself and writes its truth at its end.

    python plain_loop.py --seconds S --truth FILE

Each step: next() of a DataLoader whose 2 workers take 80 ms a batch (asleep: the loop waits for
about 5 ms of each 40), a forward of ~15 ms, a backward of ~10 ms, an optimizer step of ~5 ms (each
a spin in the module or its hook), ~5 ms of other Python. Truth: each step's end (time.monotonic()) and the shares of its own timers over the
whole run. Prints "done N steps" and exits 0.
"""

import argparse
import json
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


def spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


class Batches(Dataset):
    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        time.sleep(0.08)
        return torch.ones(8)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 1)

    def forward(self, x):
        spin(15)
        return self.lin(x)


class SlowSGD(torch.optim.SGD):
    def step(self, closure=None):
        spin(5)
        return super().step(closure)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--truth", required=True)
    ap.add_argument("--ready", help="a file made once 50 steps are done")
    args = ap.parse_args()
    model = Model()
    opt = SlowSGD(model.parameters(), lr=1e-3)
    loader = iter(DataLoader(Batches(), batch_size=1, num_workers=2))
    spent = {"data": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0, "other": 0.0}
    ends: list[float] = []
    start = time.monotonic()
    end = start + args.seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        x = next(loader)
        t1 = time.monotonic()
        loss = model(x).sum()
        t2 = time.monotonic()
        loss.register_hook(lambda g: spin(10) or g)
        loss.backward()
        t3 = time.monotonic()
        opt.step()
        opt.zero_grad()
        t4 = time.monotonic()
        spin(5)
        t5 = time.monotonic()
        for k, (a, b) in zip(spent, ((t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5)), strict=True):
            spent[k] += b - a
        ends.append(t5)
        if len(ends) == 50 and args.ready:
            open(args.ready, "w").close()
    total = sum(spent.values())
    with open(args.truth, "w") as f:
        json.dump({"step_ends": ends, "shares": {k: v / total for k, v in spent.items()}}, f)
    print(f"done {len(ends)} steps", flush=True)


if __name__ == "__main__":
    main()
