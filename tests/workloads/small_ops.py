"""A training loop of many small operators (~1,500 torch operator calls a step, a few ms each step
on the CPU): the kind of loop whose torch.profiler windows cost the most per step, since what a
window costs grows with the events it records. No tuimon import: run it under `tuimon run`.

    python small_ops.py [--layers 30] [--width 32] [--seconds 60] [--log FILE]

--log: the job's own step times, a line per step: "<end> <duration>" (CLOCK_MONOTONIC ns; a step
ends at the optimizer's step, where the probe's does), written every 0.5 s.
"""

import argparse
import time

import torch
from torch import nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--log")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(a.layers) for m in (nn.Linear(a.width, a.width), nn.ReLU())])
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, foreach=False)
    x, y = torch.randn(16, a.width), torch.randn(16, a.width)
    log = open(a.log, "w") if a.log else None  # noqa: SIM115
    lines: list[str] = []
    print("training", flush=True)
    end = time.monotonic() + a.seconds
    written = last = time.monotonic_ns()
    while last < end * 1e9:
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        t = time.monotonic_ns()
        if log is not None:
            lines.append(f"{t} {t - last}\n")
            if t - written > 500_000_000:
                log.writelines(lines)
                log.flush()
                lines.clear()
                written = t
        last = t
    if log is not None:
        log.writelines(lines)
        log.close()


if __name__ == "__main__":
    main()
