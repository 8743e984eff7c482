"""Training loops for measuring what a capture window costs (tests/gpu/check_profiler_windows.py).
No tuimon import: run them under `tuimon run`. Each logs its loss every step (.item(): the host
keeps pace with the GPU, as real loops do) and steps an optimizer.

    python gpu_loops.py matmul|kernels|gpt [--device cuda] [--seconds 120] [--step-ms 20]

matmul: a GPU-bound loop of few large kernels, sized at start to ~--step-ms a step;
kernels: ~3,000 small kernels a step (a deep narrow MLP, forward, backward, SGD per parameter);
gpt: a small GPT (6 layers, 512 wide, 256 tokens, batch 16) trained with AdamW in bf16 autocast.
"""

import argparse
import time

import torch
from torch import nn


def matmul_model(dev, step_ms):
    width = 4096 if dev.type == "cuda" else 256
    layers = [nn.Linear(width, width, bias=False) for _ in range(4)]
    model = nn.Sequential(*layers).to(dev)
    x = torch.randn(2048 if dev.type == "cuda" else 64, width, device=dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)

    def once():  # (forward and backward: the gradients add up until the step)
        loss = model(x).square().mean()
        loss.backward()
        return loss

    def passes(n):
        for _ in range(n - 1):
            once()
        loss = once()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(3):
        passes(1).item()
    t = time.perf_counter()
    for _ in range(5):
        passes(1).item()
    one_ms = (time.perf_counter() - t) / 5 * 1e3
    repeat = max(1, round(step_ms / one_ms))
    return (lambda: passes(repeat)), f"{repeat} passes of a 4-layer {width}-wide MLP a step (~{one_ms * repeat:.0f} ms)"


def kernels_model(dev, _):
    model = nn.Sequential(*[m for _ in range(300) for m in (nn.Linear(64, 64), nn.ReLU())]).to(dev)
    x, y = torch.randn(32, 64, device=dev), torch.randn(32, 64, device=dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, foreach=False)  # (a kernel per parameter)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step, "a 300-layer 64-wide MLP, SGD per parameter (~3,000 kernels a step)"


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab=8192, d=512, layers=6, heads=8, seq=256):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.zeros(1, seq, d))
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, idx):
        x = self.tok(idx) + self.pos[:, : idx.shape[1]]
        for b in self.blocks:
            x = b(x, self.mask)
        return self.head(x)


def gpt_model(dev, _):
    vocab, seq = (8192, 256) if dev.type == "cuda" else (512, 64)  # (on the CPU: a check of the scripts)
    model = (GPT() if dev.type == "cuda" else GPT(vocab, d=64, layers=2, heads=2, seq=seq)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    g = torch.Generator(device="cpu").manual_seed(0)
    data = torch.randint(0, vocab, (64, seq + 1), generator=g).to(dev)
    n = [0]

    def step():
        batch = data[(n[0] % 4) * 16:(n[0] % 4 + 1) * 16]
        n[0] += 1
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            logits = model(batch[:, :-1])
            loss = nn.functional.cross_entropy(logits.float().reshape(-1, vocab), batch[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    shape = "6 x 512, 256 tokens, batch 16, AdamW, bf16" if dev.type == "cuda" else "2 x 64, 64 tokens, batch 16, AdamW"
    return step, f"a small GPT ({shape})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("matmul", "kernels", "gpt"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--step-ms", type=float, default=20)
    a = ap.parse_args()
    dev = torch.device(a.device)
    torch.manual_seed(0)
    if dev.type == "cpu":
        torch.set_num_threads(1)
    step, what = {"matmul": matmul_model, "kernels": kernels_model, "gpt": gpt_model}[a.mode](dev, a.step_ms)
    print(f"training: {what}", flush=True)
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        step().item()


if __name__ == "__main__":
    main()
