"""A real CPU training loop (DataLoader with 2 workers) that runs until a file appears, then ends
the way it is told: `exit CODE` (sys.exit) or `raise` (an uncaught exception). With `nosteps` it
is a loop with no steps at all: no optimizer, no backward, no model call, no DataLoader (each of
those would count its steps: probe/core.py).

usage: ends_on_cue.py CUE_FILE (exit CODE | raise) (steps | nosteps)
"""

import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Batches(Dataset):
    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        return torch.randn(16, 32), torch.randn(16, 1)


def main():
    cue, how, steps = sys.argv[1], sys.argv[2:-1], sys.argv[-1] == "steps"
    torch.manual_seed(0)
    torch.set_num_threads(1)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    print("training", flush=True)
    while not steps and not os.path.exists(cue):
        time.sleep(0.02)
    for x, y in DataLoader(Batches(), batch_size=None, num_workers=2) if steps else ():
        loss = torch.nn.functional.mse_loss(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.02)
        if os.path.exists(cue):
            break
    print("finished", flush=True)
    if how == ["raise"]:
        raise RuntimeError("the job's own error at the end")
    sys.exit(int(how[1]))


if __name__ == "__main__":
    main()
