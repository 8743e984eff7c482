"""A real CPU training loop with a planted input stall, and no tuimon import.

Each batch takes BATCH_DELAY seconds to make in a DataLoader worker (2 workers, so one batch is
ready every BATCH_DELAY / 2 s at best), and each step computes for about COMPUTE seconds. In
steady state the loop therefore waits BATCH_DELAY / 2 - COMPUTE per step: the data-wait share
is 1 - COMPUTE / (BATCH_DELAY / 2).

usage: planted_wait.py STEPS BATCH_DELAY COMPUTE
"""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SlowBatches(Dataset):
    def __init__(self, n, delay):
        self.n, self.delay = n, delay

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.delay)
        return torch.randn(16, 32), torch.randn(16, 1)


def main():
    steps, delay, compute = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    torch.manual_seed(0)
    torch.set_num_threads(1)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loader = DataLoader(SlowBatches(steps, delay), batch_size=None, num_workers=2)
    print("training", flush=True)
    for x, y in loader:
        t_end = time.perf_counter() + compute
        loss = torch.nn.functional.mse_loss(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        while time.perf_counter() < t_end:  # the rest of the step's compute, on the CPU
            pass
    print("finished", flush=True)


if __name__ == "__main__":
    main()
