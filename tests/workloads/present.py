"""Training loops for the present moment, each writing its own truth: what it is doing now and how
many steps it made. No tuimon import: run them under `tuimon run`.

    python present.py KIND [--truth FILE] [--device cpu|cuda] [--steps N] [--every S]

The truth (JSON, rewritten at every phase change and step): `steps` (completed), `phase` (the
loop's own: data, forward, backward, optimizer, other), `phase_t0` and `step_t0` (time.monotonic(),
the clock tuimon's probe uses too), `pid`, `stuck` once the planted hang began, and `busy_from` once
busy-first began its work.

KIND:
  data-stuck   DataLoader with 2 workers, 20 ms batches; after --steps batches every read blocks for good
  workers      DataLoader with 2 workers, 20 ms batches, forever (a test kills a worker)
  slow         3 s steps: data 0.5 s (in a worker), forward 1.0 s, backward 1.5 s, the rest ~0
  manual       hand-written SGD (no optimizer object), 10 ms steps; --steps of them, then it exits
  accumulate   gradient accumulation: 4 backward() per optimizer.step(); --steps optimizer steps, then exits
  raise        raises RuntimeError after --steps steps
  checkpoint   30 ms steps; every --every s a 10 s checkpoint write (a real torch.save, then waiting on it)
  ddp-hang     (torchrun, gloo) DDP; after --steps steps rank 1 sleeps for good before an all_reduce
  lock-first   blocked for good on a lock before its first step (its model and optimizer made)
  sleep-first  asleep for good (time.sleep) before its first step
  input-first  waiting for good in input() before its first step (its stdin a pipe nobody writes)
  busy-first   computes on the loop's thread for --every s before its first step (a dataset made), then steps
GPU only:
  sync-stuck   after --steps steps a kernel that spins for hours, then .item() waits for it
  oom          allocations that grow each step until CUDA runs out of memory after ~--steps steps; or
               --mib MiB a step (0: none, a steady control), with --fraction F of the device's memory
               as the allocator's cap (torch.cuda.set_per_process_memory_fraction) and --step-ms
               of sleep a step (the loop's tempo)
"""

import argparse
import json
import os
import tempfile
import threading
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

FOREVER = 10**6  # seconds


class Truth:
    def __init__(self, path):
        if path and os.environ.get("RANK") is not None:
            path = f"{path}.{os.environ['RANK']}"  # (one file per rank)
        self.path, self.state = path, {"pid": os.getpid(), "steps": 0, "phase": "other", "phase_t0": time.monotonic(),
                                       "step_t0": time.monotonic(), "stuck": None}

    def phase(self, name):
        self.state.update(phase=name, phase_t0=time.monotonic())
        self.write()

    def step(self):
        now = time.monotonic()
        self.state.update(steps=self.state["steps"] + 1, step_t0=now, phase="other", phase_t0=now)
        self.write()

    def stuck(self, what):
        self.state["stuck"] = {"what": what, "at": time.monotonic()}
        self.write()

    def write(self):
        if not self.path:
            return
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.state, f)
        os.replace(tmp, self.path)


class Batches(Dataset):
    """Batches that take `ms` to make; from index `block_from` on, a read never returns."""

    def __init__(self, ms, block_from=None, n=10**9):
        self.ms, self.block_from, self.n = ms, block_from, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.block_from is not None and i >= self.block_from:
            time.sleep(FOREVER)
        time.sleep(self.ms / 1e3)
        return torch.randn(16, 32), torch.randn(16, 1)


class Sleepy(nn.Module):
    """A model whose forward takes `fwd_s` and whose backward takes `bwd_s` (sleeps)."""

    def __init__(self, fwd_s=0.0, bwd_s=0.0):
        super().__init__()
        self.lin, self.fwd_s = nn.Linear(32, 1), fwd_s
        SlowGrad.seconds = bwd_s

    def forward(self, x):
        time.sleep(self.fwd_s)
        return SlowGrad.apply(self.lin(x))


class SlowGrad(torch.autograd.Function):
    seconds = 0.0

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        time.sleep(SlowGrad.seconds)
        return g


def loader(ms, block_from=None, workers=2):
    return DataLoader(Batches(ms, block_from), batch_size=None, num_workers=workers, persistent_workers=workers > 0)


def train_with_optimizer(truth, batches, model, steps=None):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    it = iter(batches)
    while steps is None or truth.state["steps"] < steps:
        truth.phase("data")
        x, y = next(it)
        truth.phase("forward")
        loss = nn.functional.mse_loss(model(x), y)
        truth.phase("backward")
        loss.backward()
        truth.phase("optimizer")
        opt.step()
        opt.zero_grad()
        truth.step()


def manual(truth, steps, device="cpu"):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    for x, y in loader(5, workers=2):
        x, y = x.to(device), y.to(device)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.01 * p.grad
                p.grad = None
        time.sleep(0.005)
        truth.step()
        if truth.state["steps"] >= steps:
            break


def accumulate(truth, steps):
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for k, (x, y) in enumerate(loader(5, workers=2)):
        (nn.functional.mse_loss(model(x), y) / 4).backward()
        if k % 4 == 3:
            opt.step()
            opt.zero_grad()
            truth.step()
            if truth.state["steps"] >= steps:
                break


def checkpoint(truth, every):
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    last = time.monotonic()
    state = {"w": torch.randn(64, 1024, 1024)}  # 256 MiB to write
    with tempfile.TemporaryDirectory() as d:
        for x, y in loader(25, workers=2):
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            truth.step()
            if time.monotonic() - last >= every:
                truth.phase("checkpoint")
                t0 = time.monotonic()
                torch.save(state, os.path.join(d, "ckpt.pt"))
                time.sleep(max(0.0, 10.0 - (time.monotonic() - t0)))  # (waiting on a slow filesystem)
                last = time.monotonic()


def ddp_hang(truth, steps, device="cpu"):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    cuda = device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    dev = torch.device(f"cuda:{os.environ.get('LOCAL_RANK', 0)}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(dev))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    while True:
        x, y = torch.randn(16, 32, generator=g).to(dev), torch.randn(16, 1, generator=g).to(dev)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if rank == 1 and truth.state["steps"] >= steps:
            truth.stuck("sleeping before all_reduce")
            time.sleep(FOREVER)
        truth.phase("comm")
        logged = loss.detach()
        dist.all_reduce(logged)  # (the loss for logging: NCCL queues it and returns)
        logged.item()  # (...and the host waits for it here)
        time.sleep(0.02)
        truth.step()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind")
    ap.add_argument("--truth")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--every", type=float, default=60.0)
    ap.add_argument("--fraction", type=float, help="oom: the allocator's cap, a fraction of the device's memory")
    ap.add_argument("--mib", type=float, help="oom: MiB kept a step (default: what runs out after ~--steps steps)")
    ap.add_argument("--step-ms", type=float, default=0.0, help="oom: sleep this long a step")
    a = ap.parse_args()
    torch.set_num_threads(1)
    truth = Truth(a.truth)
    print(f"present {a.kind} pid {os.getpid()}", flush=True)
    if a.kind == "data-stuck":
        train_with_optimizer(truth, loader(20, block_from=a.steps), nn.Linear(32, 1))
    elif a.kind == "workers":
        train_with_optimizer(truth, loader(20), nn.Linear(32, 1))
    elif a.kind == "slow":
        train_with_optimizer(truth, loader(500, workers=0), Sleepy(1.0, 1.5))
    elif a.kind == "manual":
        manual(truth, a.steps, a.device)
    elif a.kind == "accumulate":
        accumulate(truth, a.steps)
    elif a.kind == "raise":
        train_with_optimizer(truth, loader(10), nn.Linear(32, 1), steps=a.steps)
        raise RuntimeError(f"planted failure after {a.steps} steps")
    elif a.kind == "checkpoint":
        checkpoint(truth, a.every)
    elif a.kind == "ddp-hang":
        ddp_hang(truth, a.steps, a.device)
    elif a.kind in ("lock-first", "sleep-first", "input-first", "busy-first"):
        before_first_step(truth, a.kind, a.every)
    elif a.kind == "sync-stuck":
        sync_stuck(truth, a.steps)
    elif a.kind == "oom":
        oom(truth, a.steps, a.fraction, a.mib, a.step_ms)
    else:
        ap.error(f"unknown kind {a.kind}")


def sync_stuck(truth, steps):
    model = nn.Linear(1024, 1024).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 1024, device="cuda")
    while True:
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if truth.state["steps"] >= steps:
            truth.stuck("a spinning kernel, then .item()")
            torch.cuda._sleep(2**62)  # spins for longer than anyone waits
        truth.phase("sync")
        loss.item()
        truth.step()


def oom(truth, steps, fraction=None, mib=None, step_ms=0.0):
    if fraction:
        torch.cuda.set_per_process_memory_fraction(fraction)
    free, total = torch.cuda.mem_get_info()
    room = min(free, total * fraction) if fraction else free
    chunk = int(mib * 2**20 if mib is not None else room / max(1, steps - 1)) // 4 * 4
    model = nn.Linear(1024, 1024).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 1024, device="cuda")
    kept = []
    while True:
        kept.append(torch.empty(chunk // 4, dtype=torch.float32, device="cuda"))  # activations kept by mistake
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss.item()
        if step_ms:
            time.sleep(step_ms / 1e3)
        truth.step()


def before_first_step(truth, kind, seconds):
    model = nn.Linear(32, 1)  # (train_with_optimizer makes its optimizer)
    if kind == "lock-first":
        truth.stuck("a lock, before the first step")
        lock = threading.Lock()
        lock.acquire()
        lock.acquire()  # (never released)
    elif kind == "sleep-first":
        truth.stuck("a sleep, before the first step")
        time.sleep(3600)
    elif kind == "input-first":
        truth.stuck("input(), before the first step")
        input()
    truth.state["busy_from"] = time.monotonic()  # (work, not a hang)
    truth.write()
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:  # (a dataset made in Python: the loop's thread busy)
        n += sum(i * i for i in range(1000))
    train_with_optimizer(truth, loader(20, workers=0), model)


if __name__ == "__main__":
    main()
