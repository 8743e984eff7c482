"""Training loops with a planted bottleneck, each measuring its own truth. No tuimon import: run
them under `tuimon run`, which sees them with no code change.

    python planted.py KIND [--seconds S] [--truth FILE] [--device cpu|cuda]

Every 0.5 s the loop writes its truth (since its warm-up) to FILE as JSON: its own timers around
next(), the model call, backward, the optimizer step and the rest (shares of step time), its
syncs, and for GPU loops what CUDA events and its own byte/FLOP counts say; and `log`, its last
steps one by one (ms), to compare with a monitor over the same steps.

KIND (CPU and GPU):
  phases      data 10 ms (a batch made in the loop), forward 15, backward 10, optimizer 5, other 8
  lightning   the same, with forward and backward inside optimizer.step(closure), 2 micro-batches
  input       batches take 60 ms each in 2 workers; the model computes ~5 ms
  intake      batches of 64 small tensors, made at once in 2 workers; the model computes ~25 ms: the loop's
              data wait is its own work of taking each batch in (truth: the share of next() before its batch's
              list was built, and how much of next() its thread ran, waited for a core, or was blocked: schedstat)
  python      30 ms of Python per step outside the model, no syncs
  hotspot     a small model, then 20 ms of Python at one line outside it (its share: hot_share)
  wait        a small model, then 20 ms blocked in a native call outside it (a lock's acquire with a timeout)
  optimizer   SGD(foreach=False) over 600 small parameters: the optimizer step is most of the step
KIND (GPU), the lines behind the time:
  copies      a 64 MiB batch in pageable memory copied to the GPU each step (its share: hot_share)
  outside     ~3,000 tiny ops per step from tensor code outside any nn.Module (their share: hot_share)
KIND (GPU):
  launch      a deep narrow MLP (200 layers of 64x64, batch 16): ~1,000 tiny kernels a step
  sync        ~10 ms of matmuls, loss.item(), then 10 ms of Python: host and GPU take turns (without the
              sync they would overlap); the sync is the largest part of the step
  memory      elementwise passes over 1 GiB tensors (DRAM-bound)
  compute     bf16 8192x8192 matmuls (tensor-core-bound)
  healthy     a transformer encoder (bf16 autocast) on batches already on the GPU
"""

import argparse
import json
import os
import threading
import time
from collections import deque

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

WARMUP_STEPS = 10
LOG_STEPS = 400  # the per-step log's length: more than a monitor's window


def bookkeeping(ms: float) -> None:
    """Python work of a loop's own (its own line, not spin's)."""
    end = time.perf_counter() + ms / 1e3
    n = 0
    while time.perf_counter() < end:
        n += 1


def setup(seconds: float) -> None:
    """The job's own setup before its loop (a model built, data loaded): Python at its own line,
    before the first step, which no step's time holds."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


class Made(Dataset):
    """Batches that take `ms` to make (a sleep: I/O-like), `n` of them."""

    def __init__(self, make, ms: float, n: int = 10**9):
        self.make, self.ms, self.n = make, ms, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.ms:
            time.sleep(self.ms / 1e3)
        return self.make(i)


class SlowForward(nn.Module):
    def __init__(self, ms):
        super().__init__()
        self.ms, self.lin = ms, nn.Linear(32, 1)

    def forward(self, x):
        spin(self.ms)
        return SlowBackward.apply(self.lin(x))


class SlowBackward(torch.autograd.Function):
    ms = 10.0

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        spin(SlowBackward.ms)
        return g


class SlowSGD(torch.optim.SGD):
    def __init__(self, params, ms):
        super().__init__(params, lr=0.01)
        self.ms = ms

    def step(self, closure=None):
        t = time.perf_counter()
        loss = closure() if closure is not None else None  # (the closure's time is not the optimizer's)
        self.closure_s = time.perf_counter() - t
        spin(self.ms)
        super().step()
        return loss


class Truth:
    """The loop's own accounting, written to a file twice a second."""

    def __init__(self, path, kind, device):
        self.path, self.kind, self.device = path, kind, device
        self.t = {"data": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0, "sync": 0.0}
        self.steps, self.step_s, self.syncs = 0, 0.0, 0
        self.log: deque[list[float]] = deque(maxlen=LOG_STEPS)  # every step: its time, then PARTS' (ms), for same-steps comparisons
        self.extra: dict = {}
        self.hot_s = 0.0  # the planted hot line's own time (hot_share: its share of the steps)
        self.last_write = 0.0
        self.last_add: float | None = None

    PARTS = ("data", "forward", "backward", "optimizer", "sync")

    def add(self, step_s, **parts):
        """A step of step_s (the loop's own timer, for the first step). After it, a step runs from
        one add to the next: what the loop does between its timed parts and the next step (this
        bookkeeping, the JSON write, the GPU loops' event queries) is the loop's time too, as a
        monitor sees it. Left out, a slow write would be 'other' to the monitor only: the likely
        cause of a CI failure where tuimon's window was ~9 ms/step longer than the loop's own steps,
        all of it 'other' (every phase's share 10% low)."""
        now = time.perf_counter()
        if self.last_add is not None:
            step_s = now - self.last_add
        self.last_add = now
        self.steps += 1
        self.log.append([round(1e3 * x, 3) for x in (step_s, *(parts.get(k, 0.0) for k in self.PARTS))])
        if self.steps <= WARMUP_STEPS:
            return
        self.step_s += step_s
        for k, v in parts.items():
            if k == "syncs":
                self.syncs += v
            elif k == "hot":
                self.hot_s += v
            else:
                self.t[k] += v
        if time.monotonic() - self.last_write >= 0.5:
            self.write()

    def write(self):
        self.last_write = time.monotonic()
        n = self.steps - WARMUP_STEPS
        if n <= 0 or not self.path:
            return
        shares = {k: v / self.step_s for k, v in self.t.items()}
        shares["other"] = max(0.0, 1 - sum(shares.values()))
        out = {"kind": self.kind, "device": self.device, "steps": n, "step_ms": 1e3 * self.step_s / n,
               "shares": shares, "syncs_per_step": self.syncs / n, "hot_share": self.hot_s / self.step_s,
               "log": list(self.log), **self.extra}
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(out, f)
        os.replace(tmp, self.path)


def run(kind: str, seconds: float, truth_path: str | None, device: str) -> None:
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    torch.manual_seed(0)
    if not cuda:
        torch.set_num_threads(1)
    truth = Truth(truth_path, kind, device)
    end = time.monotonic() + seconds
    print("training", flush=True)

    if kind in ("phases", "lightning"):
        SlowBackward.ms = 10.0
        net = SlowForward(15).to(dev)
        opt = SlowSGD(net.parameters(), ms=5)
        loader = iter(DataLoader(Made(lambda i: (torch.randn(16, 32), torch.randn(16, 1)), 10), batch_size=None))
        micro = 2 if kind == "lightning" else 1
        while time.monotonic() < end:
            t0 = time.perf_counter()
            parts = {"data": 0.0, "forward": 0.0, "backward": 0.0}

            def closure(parts=parts):
                for _ in range(micro):
                    a = time.perf_counter()
                    x, y = next(loader)
                    b = time.perf_counter()
                    loss = nn.functional.mse_loss(net(x.to(dev)), y.to(dev))
                    c = time.perf_counter()
                    loss.backward()
                    d = time.perf_counter()
                    parts["data"] += b - a
                    parts["forward"] += c - b
                    parts["backward"] += d - c
                return loss

            opt.zero_grad()
            if kind == "lightning":  # forward and backward run inside optimizer.step(closure)
                a = time.perf_counter()
                opt.step(closure)
                optim = time.perf_counter() - a - opt.closure_s
            else:
                closure()
                a = time.perf_counter()
                opt.step()
                optim = time.perf_counter() - a
            spin(8)  # other: Python work outside the model
            truth.add(time.perf_counter() - t0, optimizer=optim, **parts)
        truth.write()
        return

    if kind == "input":
        net = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1)).to(dev)
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        loader = DataLoader(Made(lambda i: (torch.randn(64, 256), torch.randn(64, 1)), 60), batch_size=None,
                            num_workers=2, persistent_workers=True)
        it = iter(loader)
        while time.monotonic() < end:
            t0 = time.perf_counter()
            x, y = next(it)
            b = time.perf_counter()
            loss = nn.functional.mse_loss(net(x.to(dev)), y.to(dev))
            opt.zero_grad()
            loss.backward()
            opt.step()
            spin(5)
            truth.add(time.perf_counter() - t0, data=b - t0)
        truth.write()
        return

    if kind == "intake":
        net = SlowForward(15).to(dev)
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        loader = DataLoader(Made(_many_tensors, 0), batch_size=None, num_workers=2, persistent_workers=True)
        it = iter(loader)
        ran = waited = wall = unmade = 0.0
        while time.monotonic() < end:
            t0 = time.perf_counter()
            r0, q0 = _schedstat()
            batch = next(it)
            r1, q1 = _schedstat()
            b = time.perf_counter()
            made = batch[-1].item()  # (perf_counter is CLOCK_MONOTONIC: one clock for every process)
            loss = nn.functional.mse_loss(net(batch[0].to(dev)), batch[1].to(dev))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if truth.steps >= WARMUP_STEPS:
                ran, waited, wall = ran + r1 - r0, waited + q1 - q0, wall + b - t0
                unmade += min(max(0.0, made - t0), b - t0)
                truth.extra["data_unmade"] = unmade / wall  # of the loop's time in next(): before its batch was built
                truth.extra["data_running"] = ran / wall  # of the loop's time in next(): on a CPU
                truth.extra["data_blocked"] = max(0.0, 1 - (ran + waited) / wall)  # neither running nor runnable
            truth.add(time.perf_counter() - t0, data=b - t0)
        truth.write()
        return

    # The loops below make their data on the device ahead of time: no input wait.
    if kind == "python":
        net = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1)).to(dev)
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        x, y = torch.randn(256, 512, device=dev), torch.randn(256, 1, device=dev)
        while time.monotonic() < end:
            # Timed as tuimon's phases are defined (probe/torch_hooks.py): forward is the model's call (the
            # loss computed outside it is "other"), backward is backward() (zero_grad is not). Timed with
            # them, the loss and zero_grad (~0.3 ms here, 2-3x that beside two CPU burners) read as a
            # forward and backward 0.013-0.022 larger than tuimon's.
            t0 = time.perf_counter()
            out = net(x)
            a = time.perf_counter()
            loss = nn.functional.mse_loss(out, y)
            opt.zero_grad()
            a2 = time.perf_counter()
            loss.backward()
            b = time.perf_counter()
            opt.step()
            c = time.perf_counter()
            spin(30)  # host work (metrics, logging...) that never waits for the GPU
            truth.add(time.perf_counter() - t0, forward=a - t0, backward=b - a2, optimizer=c - b)
        truth.write()
        return

    if kind in ("hotspot", "wait", "optimizer"):
        net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)).to(dev)
        params = list(net.parameters())
        if kind == "optimizer":  # 600 small parameters the optimizer updates one by one, with momentum
            extra = [nn.Parameter(torch.randn(256, device=dev)) for _ in range(600 - len(params))]
            for p in extra:
                p.grad = torch.randn_like(p)  # (kept: zero_grad(set_to_none=False) below keeps them)
            params += extra
        opt = torch.optim.SGD(params, lr=1e-6, momentum=0.9, foreach=False)
        x, y = torch.randn(32, 8, device=dev), torch.randn(32, 8, device=dev)
        held = threading.Lock()
        held.acquire()  # (nobody ever releases it: acquire(timeout=...) waits its whole timeout)
        while time.monotonic() < end:
            t0 = time.perf_counter()
            loss = nn.functional.mse_loss(net(x), y)
            a = time.perf_counter()
            loss.backward()
            b = time.perf_counter()
            opt.step()
            c = time.perf_counter()
            opt.zero_grad(set_to_none=False)
            if kind == "hotspot":
                spin(20)  # the hot line: spin()'s loop
            elif kind == "wait":
                held.acquire(timeout=0.02)  # the hot line: blocked in a native call
            d = time.perf_counter()
            bookkeeping(2)  # (elsewhere than the hot line)
            truth.add(time.perf_counter() - t0, forward=a - t0, backward=b - a, optimizer=c - b, hot=d - c)
        truth.write()
        return

    assert cuda, f"{kind} needs a GPU"
    clock = GpuClock()

    if kind in ("copies", "outside"):
        net = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1)).to(dev)
        opt = torch.optim.SGD(net.parameters(), lr=1e-4)
        batch = torch.randn(16 * 2**20 // 1024, 1024)  # 64 MiB of float32 in pageable memory
        on_gpu = batch.to(dev)
        small = torch.ones(64, device=dev)
        while time.monotonic() < end:
            t0 = time.perf_counter()
            if kind == "copies":
                on_gpu = batch.to(dev)  # the hot line: a blocking copy from pageable memory
                torch.cuda.current_stream().synchronize()
            else:
                y = small
                for _ in range(1500):  # the hot loop: 3,000 tiny kernels, no module
                    y = y * 1.0001 + 0.0001
            a = time.perf_counter()
            loss = net(on_gpu[:256]).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()
            truth.add(time.perf_counter() - t0, hot=a - t0)
        truth.extra["copy_mb"] = 64 if kind == "copies" else 0
        truth.write()
        return

    if kind == "launch":
        net = nn.Sequential(*[m for _ in range(200) for m in (nn.Linear(64, 64), nn.ReLU())]).to(dev)
        opt = torch.optim.SGD(net.parameters(), lr=1e-4, foreach=True)
        x = torch.randn(16, 64, device=dev)
        truth.extra["kernels_per_step"] = _kernels_per_step(lambda: _plain_step(net, opt, x))
        while time.monotonic() < end:
            t0 = time.perf_counter()
            e = clock.start()
            _plain_step(net, opt, x)
            clock.stop("step", e)
            truth.add(time.perf_counter() - t0)
            clock.report(truth, "step", "gpu_span_share")
        truth.write()
        return

    if kind == "sync":
        a = torch.randn(4096, 4096, device=dev)
        w = torch.randn(4096, 4096, device=dev, requires_grad=True)
        opt = torch.optim.SGD([w], lr=1e-6)
        while time.monotonic() < end:
            t0 = time.perf_counter()
            e = clock.start()
            loss = (a @ w).square().mean() + (a @ w).relu().mean()  # (4 matmuls with the backward's: ~10 ms)
            opt.zero_grad()
            loss.backward()
            opt.step()
            clock.stop("step", e)
            s = time.perf_counter()
            value = loss.item()  # waits for the GPU: the planted sync
            sync = time.perf_counter() - s
            spin(10)  # then host work, with the GPU idle: host and GPU take turns (the sync ~40% of the step)
            truth.add(time.perf_counter() - t0, sync=sync, syncs=1)
            clock.report(truth, "step", "gpu_busy_share")
            del value
        truth.write()
        return

    if kind == "memory":
        w = torch.zeros(2**28, device=dev, requires_grad=True)  # 1 GiB of fp32
        opt = torch.optim.SGD([w], lr=1e-3, foreach=True)
        while time.monotonic() < end:
            t0 = time.perf_counter()
            e = clock.start()
            y = w
            for _ in range(4):
                y = y * 1.0001 + 0.5  # 2 elementwise kernels a pass, each reading and writing 1 GiB
            clock.stop("forward", e)
            loss = y.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
            truth.add(time.perf_counter() - t0)
            clock.collect()
            if truth.steps > WARMUP_STEPS and clock.ms.get("forward"):  # forward: 8 kernels x 2 GiB moved
                truth.extra["forward_dram_tb_per_s"] = clock.n["forward"] * 8 * 2 * 2**30 / (clock.ms["forward"] / 1e3) / 1e12
        truth.write()
        return

    if kind == "compute":
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        w = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16, requires_grad=True)
        opt = torch.optim.SGD([w], lr=1e-6)
        while time.monotonic() < end:
            t0 = time.perf_counter()
            e = clock.start()
            y = a @ w
            for _ in range(3):
                y = y @ w
            clock.stop("forward", e)
            loss = y.float().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            truth.add(time.perf_counter() - t0)
            clock.collect()
            if truth.steps > WARMUP_STEPS and clock.ms.get("forward"):  # forward: 4 matmuls of 2 * 8192^3 FLOPs
                truth.extra["forward_tflops"] = clock.n["forward"] * 4 * 2 * 8192**3 / (clock.ms["forward"] / 1e3) / 1e12
        truth.write()
        return

    if kind == "healthy":
        layer = nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True, dropout=0.0)
        net = nn.TransformerEncoder(layer, 8, enable_nested_tensor=False).to(dev)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=True)
        x = torch.randn(32, 512, 1024, device=dev)
        while time.monotonic() < end:
            t0 = time.perf_counter()
            e = clock.start()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = net(x).float().square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            clock.stop("step", e)
            truth.add(time.perf_counter() - t0)
            clock.report(truth, "step", "gpu_busy_share")
        truth.write()
        return
    raise SystemExit(f"unknown kind {kind}")


class GpuClock:
    """CUDA event pairs around parts of steps, summed once they have completed (query(): the
    truth's own measurement never makes the loop wait)."""

    def __init__(self):
        self.pending, self.ms, self.n = [], {}, {}
        self.seen = 0

    def start(self):
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def stop(self, name, e0):
        e1 = torch.cuda.Event(enable_timing=True)
        e1.record()
        self.seen += 1
        if self.seen > WARMUP_STEPS:
            self.pending.append((name, e0, e1))

    def collect(self):
        while self.pending and self.pending[0][2].query():
            name, e0, e1 = self.pending.pop(0)
            self.ms[name] = self.ms.get(name, 0.0) + e0.elapsed_time(e1)
            self.n[name] = self.n.get(name, 0) + 1

    def report(self, truth, name, key):
        """GPU time of `name` over the loop's own step time, for the steps measured so far."""
        self.collect()
        n = self.n.get(name, 0)
        if n and truth.steps > WARMUP_STEPS:
            truth.extra[key] = min(1.0, self.ms[name] / 1e3 / (truth.step_s * n / (truth.steps - WARMUP_STEPS)))


def _many_tensors(i: int) -> list[torch.Tensor]:
    """A batch of 64 tensors (inputs, targets, 61 small fields), and last the time it was made."""
    return [torch.randn(16, 32), torch.randn(16, 1)] + [torch.randn(8) for _ in range(61)] + \
        [torch.tensor([time.perf_counter()], dtype=torch.float64)]


def _schedstat() -> tuple[float, float]:
    """The calling thread's time on a CPU and time runnable waiting for one (s), from the kernel
    (0, 0 where it keeps no such count: the split then reads all blocked)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            run_ns, wait_ns, _ = f.read().split()
    except (OSError, ValueError):
        return 0.0, 0.0
    return int(run_ns) / 1e9, int(wait_ns) / 1e9


def _plain_step(net, opt, x):
    loss = net(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def _kernels_per_step(step, n: int = 3) -> float:
    """Kernels one step launches, counted by torch.profiler over n steps (the truth, before the run)."""
    from torch.profiler import ProfilerActivity, profile

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    return sum(e.count for e in prof.key_averages() if e.device_type.name == "CUDA") / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--truth")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--setup-s", type=float, default=0.0, help="seconds of setup before the loop")
    a = ap.parse_args()
    setup(a.setup_s)
    run(a.kind, a.seconds, a.truth, a.device)
    print("finished", flush=True)


if __name__ == "__main__":
    main()
