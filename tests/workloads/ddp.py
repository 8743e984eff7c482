"""A DDP training job that measures its own truth per rank. No tuimon import: run it under torchrun
(itself under `tuimon run`), which sees it with no code change.

    torchrun --nproc-per-node 2 ddp.py [--device cpu|cuda] [--width 512] [--layers 4]
        [--extra-mb 0] [--slow-rank 1 --slow-ms 20 [--slow-where end|data]] [--bucket-view]
        [--batches-ahead] [--seconds 20] [--truth DIR]

(--seconds: about as long as that, in a number of steps every rank agrees on; --min-steps: at least
that many, for a loaded machine whose calibration steps run slow.)

Each rank trains an MLP (width x width x layers) under DistributedDataParallel (gloo on the CPU,
NCCL on GPUs, one GPU per rank); --extra-mb adds a parameter of that many MB whose gradient costs
almost no compute but must be all-reduced (comm grows, compute does not); --slow-rank spins
--slow-ms of Python per step on one rank, or sleeps as long with --slow-how sleep, or queues a GPU
kernel that spins as long with --slow-how gpu (a slower GPU; CUDA only) (a straggler):
at the step's end (after the optimizer step is queued), or with --slow-where data in the making of
its batch (a slow input pipeline on one rank: the GPU idles meanwhile). --batches-ahead: the batches
are made before the job and cycled (8 of them), so that the step is the model's own work (a batch
of 1024 x 4096 takes ~20 ms to draw on the CPU).

Its truth, per rank, in DIR/rank<R>.json (every 0.5 s):
- own_ms: the rank's own work per step, measured first for --calibrate steps under no_sync() (the
  same step without gradient reduction; on CUDA synchronized at each step's end, so it is GPU time);
  with --own-every K, from the job's own no_sync steps (every Kth) among its last 100 steps;
  own_ms_end: the same measured again after the job (in the last truth written);
- step_ms: the median step time of the last 100 steps of the job proper (one loss.item() a step; with
  --own-every, its own steps among them);
- comm_ms = step_ms - own_ms: what the step spends communicating and waiting for the others;
- grad_mb: the gradient bytes all-reduced per step;
- ddp (with --ddp-stats): DDP's own timings (ms, its CUDA-event timer on every 10th step):
  forward, backward compute, backward comm, and their overlap.
"""

import argparse
import json
import os
import statistics
import time
from collections import deque

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset


def spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


class Batches(IterableDataset):
    def __init__(self, batch, width, ahead=False, slow_ms=0.0, slow_how="spin"):
        self.batch, self.width, self.ahead = batch, width, ahead
        self.slow_ms, self.slow_how = slow_ms, slow_how

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        made = [self._draw(g) for _ in range(8)] if self.ahead else None
        n = 0
        while True:
            if self.slow_ms:
                delay(self.slow_ms, self.slow_how)
            yield made[n % 8] if made else self._draw(g)
            n += 1

    def _draw(self, g):
        return torch.randn(self.batch, self.width, generator=g), torch.randn(self.batch, 1, generator=g)


GPU_CYCLES_PER_MS = 0.0  # torch.cuda._sleep's rate on this GPU, measured at start with --slow-how gpu


def delay(ms: float, how: str) -> None:
    if how == "gpu":
        torch.cuda._sleep(int(ms * GPU_CYCLES_PER_MS))  # (queued: the host goes on, the GPU is late)
    else:
        spin(ms) if how == "spin" else time.sleep(ms / 1e3)


def gpu_cycles_per_ms() -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    start.record()
    torch.cuda._sleep(50_000_000)
    end.record()
    end.synchronize()
    return 50_000_000 / start.elapsed_time(end)


class Net(nn.Module):
    def __init__(self, width, layers, extra_mb):
        super().__init__()
        self.body = nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(width, width), nn.ReLU())])
        self.head = nn.Linear(width, 1)
        self.extra = nn.Parameter(torch.zeros(int(extra_mb * 2**20 / 4))) if extra_mb else None

    def forward(self, x):
        if self.extra is not None:  # a gradient of extra_mb for ~no compute, used first so that its
            # gradient is the last one ready: its reduction cannot hide behind backward's compute
            # (which would slow the compute instead on shared CPU cores, out of the comm phase)
            x = x + self.extra[:1].sum() * 0
        return self.head(self.body(x))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--extra-mb", type=float, default=0)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-ms", type=float, default=0)
    ap.add_argument("--slow-how", choices=("spin", "sleep", "gpu"), default="spin",
                    help="spin: Python on the CPU; sleep: a wait (I/O-like: leaves the CPU to the others); gpu: a GPU kernel")
    ap.add_argument("--slow-where", choices=("end", "data"), default="end")
    ap.add_argument("--batches-ahead", action="store_true", help="the batches made before the job, then cycled")
    ap.add_argument("--bucket-view", action="store_true",
                    help="DDP(gradient_as_bucket_view=True): gradients are views of DDP's buckets, not copied in and out")
    ap.add_argument("--ddp-stats", action="store_true", help="record DDP's own timings in the truth")
    ap.add_argument("--calibrate", type=int, default=30)
    ap.add_argument("--own-every", type=int, default=0,
                    help="every Kth step of the job under no_sync() too, timed: own_ms from the last 100 steps' "
                         "(the own work as the job runs, on a machine whose load changes)")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--min-steps", type=int, default=10, help="at least this many steps, however slow they are")
    ap.add_argument("--truth")
    a = ap.parse_args()

    cuda = a.device == "cuda"
    local = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local)
        if a.slow_how == "gpu":
            global GPU_CYCLES_PER_MS
            GPU_CYCLES_PER_MS = gpu_cycles_per_ms()
    else:
        torch.set_num_threads(1)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    torch.manual_seed(0)
    net = Net(a.width, a.layers, a.extra_mb).to(dev)
    model = DDP(net, device_ids=[local] if cuda else None, gradient_as_bucket_view=a.bucket_view)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    if a.ddp_stats:
        model._set_ddp_runtime_logging_sample_rate(10)
    slow_data = a.slow_ms if rank == a.slow_rank and a.slow_where == "data" else 0.0
    batches = iter(DataLoader(Batches(a.batch, a.width, a.batches_ahead, slow_data, a.slow_how), batch_size=None))
    grad_mb = sum(p.numel() * p.element_size() for p in net.parameters()) / 2**20

    def step():
        x, y = next(batches)
        loss = nn.functional.mse_loss(model(x.to(dev, non_blocking=True)), y.to(dev, non_blocking=True))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if rank == a.slow_rank and a.slow_where == "end":
            delay(a.slow_ms, a.slow_how)
        return loss

    def own_step() -> float:  # the rank's own work: the same step, no reduction (s)
        t0 = time.perf_counter()
        with model.no_sync():
            step()
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    def no_sync_ms() -> float:
        own = [own_step() for _ in range(a.calibrate + 5)][5:]
        return 1e3 * statistics.median(own)

    own_ms = no_sync_ms()
    slowest = torch.tensor([own_ms], dtype=torch.float64, device=dev)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # every rank runs the same number of steps
    total = max(a.min_steps, int(a.seconds * 1e3 / slowest.item()))
    if rank == 0:
        print("training", flush=True)

    steps: deque = deque(maxlen=100)
    owns: deque = deque(maxlen=max(1, 100 // max(1, a.own_every)))  # (the own steps among the last 100)
    last_write, n, out = 0.0, 0, None
    t_prev = time.perf_counter()
    while n < total:
        if a.own_every and n % a.own_every == a.own_every - 1:  # (every rank at the same steps)
            owns.append(own_step())
        else:
            step().item()  # the loss, as a loop logs it: the host keeps pace with the GPU
        t = time.perf_counter()
        steps.append(t - t_prev)
        t_prev, n = t, n + 1
        if a.truth and time.monotonic() - last_write >= 0.5 and len(steps) >= 10:
            last_write = time.monotonic()
            step_ms = 1e3 * statistics.median(steps)
            if len(owns) >= 3:
                own_ms = 1e3 * statistics.median(owns)
            out = {"rank": rank, "pid": os.getpid(), "device": a.device, "steps": n, "own_ms": own_ms,
                   "step_ms": step_ms, "comm_ms": step_ms - own_ms, "comm_share": max(0.0, 1 - own_ms / step_ms),
                   "grad_mb": grad_mb, "slow": rank == a.slow_rank}
            if a.ddp_stats:
                d = model._get_ddp_logging_data()
                out["ddp"] = {k: d.get(f"avg_{k}_time", 0) / 1e6 for k in (
                    "forward_compute", "backward_compute", "backward_comm", "backward_compute_comm_overlap")}
            write_truth(a.truth, rank, out)
    if a.truth and out is not None:  # the own work again, after the job: how much the truth's own varies
        out["own_ms_end"] = no_sync_ms()
        write_truth(a.truth, rank, out)
    dist.destroy_process_group()


def write_truth(folder: str, rank: int, out: dict) -> None:
    path = os.path.join(folder, f"rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(out, f)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
