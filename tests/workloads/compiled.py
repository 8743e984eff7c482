"""A compiled model's training loop that prints torch._dynamo's own counters at its end: graph
breaks, compiled graphs, captured calls. BACKEND (eager | inductor) and HOW (wrap: torch.compile(model);
inplace: model.compile()) choose the compile; OPTIMIZER=compiled: the optimizer's step compiled too (torch's
own step has a graph break of its own: torch/optim/optimizer.py); DEVICE (cpu | cuda); STEPS (30)."""

import os
import time

import torch
from torch import nn
from torch._dynamo.utils import counters


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(32, 64)
        self.b = nn.Sequential(nn.ReLU(), nn.Linear(64, 1))

    def forward(self, x):
        return self.b(self.a(x))


def main():
    torch.set_num_threads(1)
    backend, how, device = (os.environ.get(k, d) for k, d in (("BACKEND", "eager"), ("HOW", "wrap"),
                                                              ("DEVICE", "cpu")))
    model = Model().to(device)
    if how == "wrap":
        run = torch.compile(model, backend=backend)
    else:
        model.compile(backend=backend)
        run = model
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = opt.step
    if os.environ.get("OPTIMIZER") == "compiled":
        step = torch.compile(lambda: opt.step(), backend=backend)
    t0 = time.time()
    for _ in range(int(os.environ.get("STEPS", "30"))):
        x, y = torch.randn(16, 32, device=device), torch.randn(16, 1, device=device)
        loss = nn.functional.mse_loss(run(x), y)
        loss.backward()
        step()
        opt.zero_grad()
        loss.item()
        time.sleep(0.01)
    print("graph_breaks", sum(counters["graph_break"].values()), "unique_graphs", counters["stats"]["unique_graphs"],
          "calls_captured", counters["stats"]["calls_captured"], f"{time.time() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    main()
