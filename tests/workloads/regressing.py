"""A training loop that regresses mid-run, measuring its own truth. No tuimon import (but see
--fake-peak-mib): run it under `tuimon run`.

    python regressing.py [--seconds S] [--slow-after S] [--slow-by F] [--truth FILE] [--device cpu|cuda]
                         [--workers N] [--batch-ms MS] [--slow-data-by F] [--backward-ms MS] [--other-ms MS]
                         [--grow-mib N] [--fake-peak-mib A:B]

Each step: a batch from a DataLoader with 2 workers, a small model's forward, a backward that
spends 10 ms in its autograd function, the optimizer, 6 ms of other work, and loss.item(). On
the CPU the backward's 10 ms is a sleep, not a spin, so two of these loops and their monitors
share a 2-core CI machine without disturbing each other's step times; on CUDA it is bf16 8192x8192
matmuls (as many as take 10 ms, measured at start). With --slow-after S, after S seconds the
backward takes F (default 0.3) times the mean step so far longer: the step slows by F.

Other shapes of loop (the slowdowns people have):
  --workers 4 --batch-ms 320   an input-bound loop fed in bursts: each of 4 workers takes 320 ms a
                               batch (a sleep: I/O-like), so most steps find a batch ready and every
                               4th waits for the next round (mean ~80 ms, median a few ms);
                               --slow-data-by 1 makes batches 2x slower after --slow-after
  --backward-ms 2000 --other-ms 0   2 s steps (--slow-by 0.5 after --slow-after: 3 s steps)
  --grow-mib 4096              from --slow-after on, the loop keeps 4 GiB more on its device (on a
                               GPU: the caching allocator's peak allocated grows by that)
  --fake-peak-mib 1000:1200    on a CPU (no CUDA allocator), the probe's allocator gauges are fed
                               fake numbers at their one boundary (Probe.sample_memory): a peak
                               allocated of 1000 MiB, 1200 MiB from --slow-after on

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
    """batch_ms to make each (a sleep), (1 + slow_by) times that from CLOCK_MONOTONIC slow_at on
    (workers are processes: the clock they share says when)."""

    def __init__(self, batch_ms=0.0, slow_at=None, slow_by=0.0):
        self.batch_ms, self.slow_at, self.slow_by = batch_ms, slow_at, slow_by

    def __len__(self):
        return 10**9

    def __getitem__(self, i):
        if self.batch_ms:
            slow = self.slow_at is not None and time.monotonic() >= self.slow_at
            time.sleep(self.batch_ms * (1 + self.slow_by if slow else 1) / 1e3)
        return torch.randn(32, 64), torch.randn(32, 1)


def fake_allocator(peak_mib, slowed) -> None:
    """The CUDA caching allocator's gauges, as the probe publishes them, with fake numbers: for CPU
    tests of what the monitor does with a peak that grows (there is no allocator here)."""
    from tuimon.channel import layout as L
    from tuimon.channel import ring
    from tuimon.probe import core

    def sample_memory(probe):
        peak = peak_mib[1] if slowed() else peak_mib[0]
        t, tid = time.monotonic_ns(), ring.thread_id()
        for name, mib in (("cuda.allocated", 0.6 * peak), ("cuda.reserved", 1.1 * peak), ("cuda.peak_allocated", peak),
                          ("cuda.alloc_retries", 0), ("cuda.ooms", 0)):
            probe.emit(L.GAUGE, 0, probe.intern(name), tid, probe.step_no, 0, t, float(mib * 2**20))

    core.Probe.sample_memory = sample_memory


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
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-ms", type=float, default=0)
    ap.add_argument("--slow-data-by", type=float, default=0)
    ap.add_argument("--backward-ms", type=float, default=10)
    ap.add_argument("--other-ms", type=float, default=6)
    ap.add_argument("--grow-mib", type=float, default=0)
    ap.add_argument("--fake-peak-mib", help="A:B, see above")
    a = ap.parse_args()
    WaitingBackward.ms = a.backward_ms
    step_log = open(a.step_log, "w", buffering=1 << 16) if a.step_log else None
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        calibrate_gpu(dev)
    net = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    start = time.monotonic()
    end, slow_at = start + a.seconds, start + a.slow_after if a.slow_after > 0 else None
    data = Batches(a.batch_ms, slow_at, a.slow_data_by)
    it = iter(DataLoader(data, batch_size=None, num_workers=a.workers, persistent_workers=True))
    truth = {"slowed_at": None, "steps_before": 0, "ms_before": 0.0, "steps_after": 0, "ms_after": 0.0}
    if a.fake_peak_mib:
        fake_allocator([float(x) for x in a.fake_peak_mib.split(":")], lambda: truth["slowed_at"] is not None)
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
        time.sleep(a.other_ms / 1e3)
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
            if a.grow_mib:
                kept = torch.ones(int(a.grow_mib * 2**20 / 4), device=dev)  # noqa: F841 - held to the end
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
