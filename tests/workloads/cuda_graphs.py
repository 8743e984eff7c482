"""Loops that capture CUDA graphs by hand, as PyTorch's CUDA-graph notes show. No tuimon import: run
them plainly and under `tuimon run`; each prints its own step count and ends with exit code 0.

    python cuda_graphs.py MODE [--seconds S] [--capture-at N] [--recapture-every N] [--mode global|thread_local|relaxed]

MODE:
  forward   a frozen backbone's forward captured (no grad) after a warm-up on a side stream; every
            step copies its batch in, replays the graph and runs an eager head (forward, backward,
            optimizer); re-captured every --recapture-every steps (0: once)
  whole     the whole step captured (forward, backward, a capturable Adam's step), replayed each step

The first --capture-at steps run eagerly, so that a probe is already measuring when the capture comes.
"""

import argparse
import time

import torch
from torch import nn


def mlp(width: int, depth: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers)


def warm_up(fn, steps: int = 3) -> None:
    """The warm-up PyTorch's notes ask for before a capture: a few iterations on a side stream."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(steps):
            fn()
    torch.cuda.current_stream().wait_stream(s)


class ForwardLoop:
    """forward mode's step, one call a step (benchmarks/step_overhead.py --model graph-forward times
    the same step with the probe on and off)."""

    def __init__(self, capture_at: int, recapture_every: int = 0, mode: str = "global") -> None:
        dev = self.dev = torch.device("cuda")
        self.backbone, self.head = mlp(2048, 6).to(dev).eval(), nn.Linear(2048, 10).to(dev)
        self.opt = torch.optim.SGD(self.head.parameters(), lr=1e-3)
        self.static_in = torch.randn(256, 2048, device=dev)
        self.target = torch.randint(0, 10, (256,), device=dev)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_feat: torch.Tensor | None = None
        self.capture_at, self.recapture_every, self.mode = capture_at, recapture_every, mode
        self.steps = 0

    def eager_step(self, feat):
        self.opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(self.head(feat), self.target)
        loss.backward()
        self.opt.step()
        return loss

    def step(self) -> None:
        steps, at, every = self.steps, self.capture_at, self.recapture_every
        self.static_in.copy_(torch.randn(256, 2048, device=self.dev))
        if steps == at or (every and steps > at and (steps - at) % every == 0):
            with torch.no_grad():
                warm_up(lambda: self.backbone(self.static_in))
                self.graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self.graph, capture_error_mode=self.mode):
                    self.static_feat = self.backbone(self.static_in)
        if self.graph is not None:
            self.graph.replay()
            feat = self.static_feat
        else:
            with torch.no_grad():
                feat = self.backbone(self.static_in)
        loss = self.eager_step(feat)
        if steps % 100 == 0:
            loss.item()
        self.steps = steps + 1


def forward_mode(args) -> int:
    loop = ForwardLoop(args.capture_at, args.recapture_every, args.mode)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        loop.step()
    torch.cuda.synchronize()
    return loop.steps


def whole_mode(args) -> int:
    dev = torch.device("cuda")
    model = mlp(1024, 4).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, capturable=True)
    static_in = torch.randn(128, 1024, device=dev)
    static_target = torch.randn(128, 1024, device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(static_in), static_target)
        loss.backward()
        opt.step()
        return loss

    steps, end = 0, time.monotonic() + args.seconds
    while steps < args.capture_at and time.monotonic() < end:
        step()
        steps += 1
    warm_up(step)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph, capture_error_mode=args.mode):
        static_loss = step()
    while time.monotonic() < end:
        static_in.copy_(torch.randn(128, 1024, device=dev))
        graph.replay()
        if steps % 100 == 0:
            static_loss.item()
        steps += 1
    torch.cuda.synchronize()
    return steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["forward", "whole"])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--capture-at", type=int, default=200)
    ap.add_argument("--recapture-every", type=int, default=0)
    ap.add_argument("--mode", default="global", choices=["global", "thread_local", "relaxed"])
    args = ap.parse_args()
    steps = (forward_mode if args.kind == "forward" else whole_mode)(args)
    print(f"steps {steps}", flush=True)


if __name__ == "__main__":
    main()
