"""The demo workload: a small convolutional classifier on synthetic images, with a real
DataLoader (2 worker processes) whose batches take a little time to make, on the GPU when there
is one and on the CPU otherwise. Run it under `tuimon demo` (or `tuimon run`)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import signal
import time
from types import FrameType
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

try:  # ranges show in the monitor (and in nsys) when the probe is installed
    from tuimon import range as annotate
except ImportError:  # pragma: no cover - the workload also runs without tuimon
    def annotate(name: str) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


class SyntheticImages(Dataset):
    """Random images and labels; each batch costs `delay` seconds to "decode"."""

    def __init__(self, batches: int, batch: int, size: int, delay: float) -> None:
        self.batches, self.batch, self.size, self.delay = batches, batch, size, delay

    def __len__(self) -> int:
        return self.batches

    def __getitem__(self, i: int) -> tuple[Any, Any]:  # (images, labels): tensors
        time.sleep(self.delay)
        g = torch.Generator().manual_seed(i)
        x = torch.randn(self.batch, 3, self.size, self.size, generator=g)
        y = torch.randint(0, 10, (self.batch,), generator=g)
        return x, y


def die_with_the_loop(loop_pid: int, worker_id: int) -> None:
    """A DataLoader worker of the demo ends when its loop does, however the loop ends (tuimon demo
    kills the loop when tuimon dies; an orphaned worker can block for good on its full result pipe,
    whose other end its sibling still holds). A loop that died before this ran (a kill while the
    workers start, seen once in the suite on a loaded machine) sends no signal: the worker's parent
    is no longer the loop then, and it ends here."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != loop_pid:
        os._exit(1)


def model(width: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.ReLU(),
        nn.Conv2d(width, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(2 * width, 10),
    )


class StopAtStepEnd:
    """SIGINT (`tuimon demo` stops its job so when you quit; Ctrl-C) ends the loop at the end of
    its step, not wherever it is: a KeyboardInterrupt inside the DataLoader's fetch can cut the
    handshake in which the loop takes a batch's file descriptors from a worker, and the worker
    prints the broken connection's traceback (seen once in the quit test). A second one stops at once."""

    requested = False

    @classmethod
    def install(cls) -> None:
        signal.signal(signal.SIGINT, cls._on_sigint)

    @classmethod
    def _on_sigint(cls, signum: int, frame: FrameType | None) -> None:
        if cls.requested:
            raise KeyboardInterrupt
        cls.requested = True


def main(argv: list[str] | None = None) -> None:
    StopAtStepEnd.install()
    try:
        train(argv)
    except KeyboardInterrupt:  # a second interrupt
        pass
    if StopAtStepEnd.requested:  # a normal end
        print("demo workload stopped", flush=True)


def train(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seconds", type=float, default=0, help="stop after this long (0: never)")
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: never)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--delay", type=float, default=0.03, help="seconds to make one batch")
    p.add_argument("--device", default="auto")
    p.add_argument("--report", action="store_true", help="print the mean step time at the end")
    a = p.parse_args(argv)
    device = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if a.device == "auto" else a.device))
    big = device.type == "cuda"
    batch, size, width = (256, 64, 128) if big else (32, 32, 16)
    torch.set_num_threads(1) if not big else None
    net = model(width).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    data = SyntheticImages(10**9, batch, size, a.delay)
    loader = DataLoader(data, batch_size=None, shuffle=False, num_workers=a.workers,
                        pin_memory=big, persistent_workers=a.workers > 0,
                        worker_init_fn=functools.partial(die_with_the_loop, os.getpid()))
    print(f"demo workload on {device}: batch {batch}x3x{size}x{size}, {a.workers} workers", flush=True)
    start, step, times = time.monotonic(), 0, []
    t_last = time.perf_counter()
    for x, y in loader:
        with annotate("h2d"):
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with annotate("forward"):
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=big):
                loss = nn.functional.cross_entropy(net(x), y)
        with annotate("backward"):
            opt.zero_grad(set_to_none=True)
            loss.backward()
        with annotate("optimizer"):
            opt.step()  # the probe counts a step here, from torch's optimizer hooks
        if big:
            with annotate("sync"):
                torch.cuda.synchronize()
        try:
            import tuimon
            tuimon.count("samples", batch)
        except ImportError:  # pragma: no cover
            pass
        step += 1
        now = time.perf_counter()
        times.append(now - t_last)
        t_last = now
        if (a.steps and step >= a.steps) or (a.seconds and time.monotonic() - start >= a.seconds) \
                or StopAtStepEnd.requested:
            break
    if a.report and len(times) > 20:
        steady = times[10:]  # past warm-up
        print(f"mean_step_ms {1e3 * sum(steady) / len(steady):.3f} over {len(steady)} steps", flush=True)


if __name__ == "__main__":
    main()
