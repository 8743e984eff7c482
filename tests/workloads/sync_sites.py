"""Two sync call sites a step, each with its own wait, measuring its own truth (issue 43 item 3:
tuimon must name both sites, not only the one after a time gap). No tuimon import: run it under
`tuimon run`, or plainly and `tuimon inject` it.

    python sync_sites.py [--seconds S] [--truth FILE] [--device cpu|cuda]

A step: `train_step()` queues matmuls (forward, backward), optimizer.step(), then `loss.item()`
(site "item", in the step function) waits for them; back in the loop body a few more matmuls are
queued and `torch.cuda.synchronize()` (site "synchronize") waits for those; then host work with the
GPU idle. On an H200 the waits are sized at start (the matmul's measured time) to about 30% and 15%
of the step. Every 0.5 s the loop writes its truth (since its warm-up) to FILE as JSON: per site its
line, calls per step and the share of step time blocked in the call (time.perf_counter around it).
On CPU (a smoke test) .item() is not a GPU sync and there is no synchronize: the shares mean nothing.
"""

import argparse
import json
import os
import time

import torch

WARMUP_STEPS = 10
ITEM_MS, SYNC_MS, HOST_MS = 12.0, 6.0, 22.0  # the targets: the two waits and the host's own work a step
_MARK = "# sync" + "-site:"  # (split: this line is not a site)


def site_lines() -> dict[str, int]:
    """The line of each marked site in this file (what tuimon should name)."""
    with open(__file__) as f:
        return {line.split(_MARK)[1].strip(): i for i, line in enumerate(f, 1) if _MARK in line}


def spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


class Truth:
    """The loop's own accounting of the two sites, written to a file twice a second."""

    def __init__(self, path, device, extra):
        self.path, self.device, self.extra = path, device, extra
        self.lines = site_lines()
        self.blocked = {k: 0.0 for k in self.lines}
        self.calls = {k: 0 for k in self.lines}
        self.steps, self.step_s, self.last_write = 0, 0.0, 0.0
        self.last_add: float | None = None

    def add(self, **blocked):
        """One step: from the last add to this one (the loop's whole time, writes included)."""
        now = time.perf_counter()
        step_s = now - self.last_add if self.last_add is not None else 0.0
        self.last_add = now
        self.steps += 1
        if self.steps <= WARMUP_STEPS:
            return
        self.step_s += step_s
        for k, v in blocked.items():
            self.blocked[k] += v
            self.calls[k] += 1
        if time.monotonic() - self.last_write >= 0.5:
            self.write()

    def write(self):
        self.last_write = time.monotonic()
        n = self.steps - WARMUP_STEPS
        if n <= 0 or not self.path or self.step_s <= 0:
            return
        sites = {k: {"line": self.lines[k], "calls_per_step": self.calls[k] / n,
                     "share": self.blocked[k] / self.step_s, "wait_ms": 1e3 * self.blocked[k] / max(1, self.calls[k])}
                 for k in self.lines}
        out = {"kind": "sync_sites", "device": self.device, "file": os.path.abspath(__file__), "steps": n,
               "step_ms": 1e3 * self.step_s / n, "sync_share": sum(s["share"] for s in sites.values()),
               "sites": sites, **self.extra}
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(out, f)
        os.replace(tmp, self.path)


def matmul_ms(a, b, cuda) -> float:
    """One a @ b's GPU time (ms), measured on a queue of 20."""
    for _ in range(3):
        a @ b
    if cuda:
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(20):
        a @ b
    if cuda:
        torch.cuda.synchronize()
    return 1e3 * (time.perf_counter() - t) / 20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--truth")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    torch.manual_seed(0)
    n = 4096 if cuda else 256
    a = torch.randn(n, n, device=dev)
    w = torch.randn(n, n, device=dev, requires_grad=True)
    extra = torch.randn(n, n, device=dev)
    opt = torch.optim.SGD([w], lr=1e-9)
    one = matmul_ms(a, extra, cuda)
    # the step function's work is 2 matmuls (forward, and backward's for w) times `reps`
    reps = max(1, round(ITEM_MS / (2 * one))) if cuda else 1
    more = max(1, round(SYNC_MS / one)) if cuda else 1
    truth = Truth(args.truth, args.device, {"matmul_ms": round(one, 3), "reps": reps, "more": more})
    print(f"sync_sites: {args.device}, matmul {one:.2f} ms, {2 * reps} + {more} matmuls a step, "
          f"sites {truth.lines}", flush=True)

    def train_step():
        loss = sum((a @ w).mean() for _ in range(reps))
        opt.zero_grad()
        loss.backward()
        opt.step()
        s = time.perf_counter()
        value = loss.item()  # sync-site: item
        return value, time.perf_counter() - s

    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        _, item_s = train_step()
        for _ in range(more):
            y = extra @ extra
        s = time.perf_counter()  # (looked up at each call: `tuimon inject` swaps it in a running job)
        torch.cuda.synchronize() if cuda else None  # sync-site: synchronize
        sync_s = time.perf_counter() - s
        del y
        spin(HOST_MS)  # host work with the GPU idle
        truth.add(item=item_s, synchronize=sync_s)
    truth.write()


if __name__ == "__main__":
    main()
