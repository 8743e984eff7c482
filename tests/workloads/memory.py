"""Loops for issue 24 (GPU memory), each writing its own truth (--truth FILE, JSON) beside what
tuimon shows. No tuimon import: run them under `tuimon run`.

  fake     (CPU) a small MLP whose "allocator" is a fake at the torch boundary where CPU torch has
           none (torch.cuda.memory._record_memory_history / _snapshot, torch.cuda.is_initialized):
           while recording, each layer's output is an alloc event with the real Python stack that
           made it, freed after backward; _snapshot returns the documented snapshot format. The
           truth: the recorder's calls, and the line and size of the largest output.
  retry    (GPU) a planted allocator-retry pattern under a per-process memory fraction (--cap GiB):
           activations whose sizes grow every step (retry() says why the allocator retries about
           every other step); the truth: num_alloc_retries after every step. With
           PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True the same loop should not retry.
  oom      (GPU) activations kept each step until CUDA runs out after about --steps steps
  model    (GPU) a small GPT-style transformer with explicit attention (its B*H*T*T scores are the
           largest activations): the truth: the tensors autograd saves for backward (one step's)
  bench    (GPU) what recording the allocator's history costs an allocation, per setting; the cost of
           memory_stats() and reset_peak_memory_stats()
"""

import argparse
import json
import os
import threading
import time
import traceback

import torch
from torch import nn

MAX_FRAMES = 24


class Truth:
    def __init__(self, path):
        self.path, self.state, self.lock = path, {"pid": os.getpid(), "steps": 0}, threading.Lock()

    def write(self, **kw):
        with self.lock:  # (the fake recorder writes from tuimon's thread too)
            self.state.update(kw)
            if self.path:
                tmp = self.path + ".tmp"
                with open(tmp, "w") as f:
                    json.dump(self.state, f)
                os.replace(tmp, self.path)


# -- fake: the allocator's history where CPU torch has none --------------------------------------


class FakeAllocatorHistory:
    """torch.cuda.memory's recorder and snapshot, for a CPU job: layer outputs as allocations."""

    def __init__(self, truth):
        self.truth, self.calls, self.recording, self.events, self.live = truth, [], False, [], {}
        self.next_addr = 1 << 32
        self.lock = threading.Lock()  # (as the allocator's mutex: a snapshot sees one moment)

    def record(self, enabled="all", **kw):
        self.calls.append({"enabled": enabled, **kw, "step": self.truth.state["steps"]})
        self.truth.write(recorder_calls=self.calls)
        self.recording = enabled is not None
        if enabled is not None and kw.get("clear_history"):
            self.events = []

    def alloc(self, nbytes, frames):
        with self.lock:
            addr, self.next_addr = self.next_addr, self.next_addr + nbytes + 512
            self.live[addr] = (nbytes, frames)
            if self.recording:
                self.events.append({"action": "alloc", "addr": addr, "size": nbytes, "stream": 0, "frames": frames,
                                    "time_us": int(time.time() * 1e6)})
        return addr

    def free(self, addr):
        with self.lock:
            nbytes, _ = self.live.pop(addr)
            if self.recording:
                for action in ("free_requested", "free_completed"):
                    self.events.append({"action": action, "addr": addr, "size": nbytes, "stream": 0, "frames": [],
                                        "time_us": int(time.time() * 1e6)})

    def snapshot(self, device=None, augment_with_fx_traces=False):
        params = 1 << 20  # a block live from before the window: the parameters
        blocks = [{"address": 1 << 30, "size": params, "requested_size": params, "state": "active_allocated",
                   "frames": []}]
        with self.lock:
            blocks += [{"address": a, "size": n, "requested_size": n, "state": "active_allocated", "frames": f}
                       for a, (n, f) in self.live.items()]
            events = list(self.events)
        segments = [{"device": 0, "address": b["address"], "total_size": b["size"], "stream": 0,
                     "segment_type": "large", "segment_pool_id": (0, 0), "allocated_size": b["size"],
                     "active_size": b["size"], "requested_size": b["size"], "blocks": [b]} for b in blocks]
        self.truth.write(snapshot_step=self.truth.state["steps"])
        return {"segments": segments, "device_traces": [events]}


def _frames():
    """The Python stack here, innermost first, as the allocator records it (this file's hook frames
    left out: they stand for torch's own)."""
    stack = [f for f in traceback.extract_stack() if f.name not in ("_frames", "hook", "_call_impl")]
    return [{"filename": f.filename, "line": f.lineno, "name": f.name} for f in reversed(stack)][:MAX_FRAMES]


def fake(truth, steps, seconds, die_in_window=0):
    fake = FakeAllocatorHistory(truth)
    torch.cuda.is_initialized = lambda: True  # the job "uses CUDA": the recorder is the fake's
    torch.cuda.memory._record_memory_history = fake.record
    torch.cuda.memory._snapshot = fake.snapshot
    wide, narrow = nn.Linear(64, 2048), nn.Linear(2048, 8)
    outputs = []

    def hook(module, args, out):
        outputs.append(fake.alloc(out.numel() * out.element_size(), _frames()))

    for m in (wide, narrow):
        m.register_forward_hook(hook)
    opt = torch.optim.SGD(list(wide.parameters()) + list(narrow.parameters()), lr=1e-3)
    x, y = torch.randn(256, 64), torch.randn(256, 8)
    truth.write(largest={"line": WIDE_LINE, "bytes": 256 * 2048 * 4}, file=os.path.abspath(__file__))
    print("training", flush=True)
    end = time.monotonic() + seconds
    while truth.state["steps"] < steps and time.monotonic() < end:
        h = wide(x)  # WIDE_LINE: the largest output
        out = narrow(torch.relu(h))
        loss = nn.functional.mse_loss(out, y)
        opt.zero_grad()
        loss.backward()
        for a in outputs:  # (autograd frees what it saved during backward)
            fake.free(a)
        outputs.clear()
        opt.step()
        truth.write(steps=truth.state["steps"] + 1)
        time.sleep(0.01)
        if die_in_window and fake.recording and truth.state["steps"] >= fake.calls[-1]["step"] + die_in_window:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
                                         "of 79.19 GiB of which 1.07 GiB is free.")


WIDE_LINE = next(i for i, line in enumerate(open(__file__), 1) if line.strip().startswith("h = wide(x)"))


# -- retry: a planted allocator-retry pattern ------------------------------------------------------


def retry(truth, steps, seconds, cap_gib, share=0.48, first_mib=32, grow_mib=2):
    """Each step the same bytes of activations (share of the cap) in fewer, longer tensors, 2 MiB
    longer every step (a sequence-length curriculum). The caching allocator keeps segments of the
    last step's sizes, which the next step's never fit: it calls cudaMalloc anew each step, and the
    cap (two steps' worth) makes it free its cache and retry about every other step. With
    expandable segments the freed activations coalesce in one segment and the next step's fit."""
    total = torch.cuda.get_device_properties(0).total_memory
    cap = int(cap_gib * 2**30)
    torch.cuda.set_per_process_memory_fraction(cap / total, 0)
    model = nn.Linear(4096, 4096).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    x = torch.randn(2048, 4096, device="cuda")
    retries = []
    truth.write(cap=cap, expandable="expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))
    print("training", flush=True)
    end = time.monotonic() + seconds
    while truth.state["steps"] < steps and time.monotonic() < end:
        size = (first_mib + grow_mib * truth.state["steps"]) * 2**20
        acts = []
        for _ in range(max(1, int(share * cap) // size)):  # the planted activations
            t = torch.empty(size // 4, device="cuda")
            t[: 1 << 18].fill_(1.0)  # (touched, as an activation is)
            acts.append(t)
        h = x
        for _ in range(8):  # the step's compute (~30 ms on an H100)
            h = torch.tanh(model(h))
        h.square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        del acts
        torch.cuda.synchronize()
        retries.append(torch.cuda.memory_stats()["num_alloc_retries"])
        truth.write(steps=truth.state["steps"] + 1, retries=retries)


# -- oom: activations kept until CUDA runs out ------------------------------------------------------


def oom(truth, steps):
    free, _ = torch.cuda.mem_get_info()
    chunk = int(free / max(1, steps - 1)) // 4 * 4
    model = nn.Linear(1024, 1024).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 1024, device="cuda")
    kept = []
    print("training", flush=True)
    while True:
        kept.append(torch.empty(chunk // 4, device="cuda").fill_(1.0))  # kept by mistake: the OOM, about step --steps
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss.item()
        time.sleep(0.15)  # (the gauges are read twice a second)
        truth.write(steps=truth.state["steps"] + 1, allocated=torch.cuda.memory_allocated())


# -- model: a small GPT-style transformer ----------------------------------------------------------


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.ln1, self.ln2 = heads, nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5  # SCORES_LINE: B*H*T*T, the largest
        att = scores.softmax(-1)  # SOFTMAX_LINE: kept for backward
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


def _line(start):
    return next(i for i, line in enumerate(open(__file__), 1) if line.strip().startswith(start))


SCORES_LINE, SOFTMAX_LINE = _line("scores = q @ k"), _line("att = scores.softmax")


def model(truth, steps, seconds, batch=8, seq=1024, d=512, heads=8, layers=4, vocab=4096):
    """The truth: the tensors autograd saves for backward in one step (the model's activations,
    by their own sizes, from saved_tensors_hooks), and every step's time."""
    torch.manual_seed(0)
    emb = nn.Embedding(vocab, d).cuda()
    blocks = nn.ModuleList(Block(d, heads) for _ in range(layers)).cuda()
    head = nn.Linear(d, vocab).cuda()
    params = list(emb.parameters()) + list(blocks.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    truth.write(lines=[SCORES_LINE, SOFTMAX_LINE], file=os.path.abspath(__file__),
                attention_bytes=batch * heads * seq * seq * 4, layers=layers)
    print("training", flush=True)
    end = time.monotonic() + seconds
    step_ms, saved = [], {}

    def pack(t):
        if t.is_cuda:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    while truth.state["steps"] < steps and time.monotonic() < end:
        t0 = time.perf_counter()
        tokens = torch.randint(0, vocab, (batch, seq + 1), device="cuda")
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t) if truth.state["steps"] == 2 else _nothing():
            x = emb(tokens[:, :-1])
            for blk in blocks:
                x = blk(x)
            loss = nn.functional.cross_entropy(head(x).flatten(0, 1), tokens[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()
        step_ms.append(round((time.perf_counter() - t0) * 1e3, 2))
        if saved and "saved" not in truth.state:  # the activations, largest first: [bytes, how many]
            sizes = sorted(saved.values(), reverse=True)
            truth.write(saved=[[n, sizes.count(n)] for n in sorted(set(sizes), reverse=True)[:8]])
        truth.write(steps=truth.state["steps"] + 1, step_ms=step_ms[-400:])


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# -- bench: what recording the allocator's history costs an allocation ------------------------------


def bench(truth, n=20000, depth=24):
    """Per alloc+free of a cached 1 MiB block, called under a Python stack `depth` frames deep (a
    model's), with history off and under each setting; then torch.cuda.memory_stats() and
    torch.cuda.reset_peak_memory_stats() (what a per-phase peak would call at each boundary)."""
    torch.empty(1 << 18, device="cuda")
    out = {}

    def deep(k, fn):
        return deep(k - 1, fn) if k else fn()

    def loop():
        t0 = time.perf_counter()
        for _ in range(n):
            torch.empty(1 << 18, device="cuda")
        return (time.perf_counter() - t0) / n * 1e6

    settings = {"off": None, "alloc, python": dict(context="alloc", stacks="python"),
                "all, python": dict(context="all", stacks="python"), "all, all (C++ too)": dict(context="all", stacks="all")}
    for name, kw in settings.items():
        if kw is not None:  # (20,000 events kept: the C++ setting's snapshot symbolizes every frame it holds)
            torch.cuda.memory._record_memory_history(enabled="all", max_entries=n, **kw)
        deep(depth, loop)  # (warm)
        out[name] = round(min(deep(depth, loop) for _ in range(3)), 3)
        if kw is not None:
            t0 = time.perf_counter()
            snap = torch.cuda.memory._snapshot()
            out[name + ": snapshot ms"] = round((time.perf_counter() - t0) * 1e3, 1)
            out[name + ": events"] = sum(len(d) for d in snap["device_traces"])
            torch.cuda.memory._record_memory_history(enabled=None)
            del snap
    for name, fn in (("memory_stats us", torch.cuda.memory_stats), ("reset_peak_memory_stats us",
                                                                    torch.cuda.reset_peak_memory_stats)):
        fn()
        t0 = time.perf_counter()
        for _ in range(1000):
            fn()
        out[name] = round((time.perf_counter() - t0) / 1000 * 1e6, 2)
    truth.write(bench=out)
    print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["fake", "retry", "oom", "model", "bench"])
    ap.add_argument("--steps", type=int, default=10**9)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--cap", type=float, default=8.0, help="retry: the per-process memory cap, GiB")
    ap.add_argument("--die-in-window", type=int, default=0, help="fake: raise CUDA's OOM error this many steps into a "
                                                                  "memory window")
    ap.add_argument("--truth")
    a = ap.parse_args()
    truth = Truth(a.truth)
    if a.kind == "fake":
        fake(truth, a.steps, a.seconds, a.die_in_window)
    elif a.kind == "retry":
        retry(truth, a.steps, a.seconds, a.cap)
    elif a.kind == "oom":
        oom(truth, a.steps)
    elif a.kind == "bench":
        bench(truth)
    else:
        model(truth, a.steps, a.seconds)


if __name__ == "__main__":
    main()
