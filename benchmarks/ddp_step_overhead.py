"""What the probe, comm timing included, costs a DDP step (issue 11's budget: <= 1% of the step).

    torchrun --nproc-per-node 2 benchmarks/ddp_step_overhead.py [--device cuda] [--cycles 12]
        [--block-steps 50] [--width 4096] [--layers 8] [--batch 64] [--no-monitor]
        [--arms off,probe,comm]

Each rank trains an MLP (width x width x layers) under DistributedDataParallel (NCCL on GPUs, one
per rank; gloo on the CPU). The probe is instrumented once; blocks of steps then rotate between the
arms, in forward-then-reverse order each cycle (off, probe, comm, comm, probe, off), the same on
every rank, so the ranks stay in step and slow drifts cancel; the first --settle steps after a switch
are not timed (switching the probe on re-registers hooks: a one-off a job never pays each block):
  off         the probe off (every wrapper and hook swapped back: torch_hooks.set_enabled, as in
              step_overhead.py): what a process without tuimon runs
  probe       the probe on without its comm timing
  comm        the probe on with comm timing: what a job under tuimon runs
  comm-hooks  (diagnostic) comm timing without its CUDA event pairs
  probe-no<X> (diagnostic) the probe without comm timing and without one of its parts: X = gpu (its
              CUDA events, gpu_timing.py), syncs (the sync wrappers: .item(), .to(), ...), fwd (the
              DDP forward wrapper: the forward phase), bwd (the backward wrapper)
Alternating inside one job, not between jobs: two launches of the same DDP job differed by up to
18% on two H200s (tests/gpu/check_ranks.sh, part C), far above a 1% budget. `tuimon record` watches
rank 0 (and so every rank) the whole time. Rank 0 prints the table: per rank and arm, the median
block's step time, its ratio to "off" and the spread (p25..p75) of the per-cycle ratios; "comm /
probe" is what comm timing itself adds, measured side by side.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--cycles", type=int, default=12, help="each a block per arm forward, then reverse")
    ap.add_argument("--block-steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--settle", type=int, default=5, help="untimed steps after each switch")
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--no-monitor", action="store_true", help="the probe alone (on a machine with fewer cores than ranks + 1)")
    ap.add_argument("--raw", help="write each rank's blocks to RAW.rank<R>.json")
    ap.add_argument("--arms", default="off,probe,comm", help="off, probe, comm, comm-hooks, probe-no<X> (the docstring)")
    a = ap.parse_args()
    os.environ.setdefault("TUIMON_SHM_DIR", tempfile.mkdtemp())

    import tuimon
    from tuimon.probe import api, state, torch_hooks

    parts = {"probe-nosyncs": {"item", "tolist", "cpu", "__bool__", "__int__", "__float__", "to", "synchronize"},
             "probe-nofwd": {"forward"}, "probe-nobwd": {"backward", "grad"}, "probe-nogpu": set()}
    arms = a.arms.split(",")
    assert arms[0] == "off" and set(arms) <= {"off", "probe", "comm", "comm-hooks", *parts}, "--arms: off first"
    assert tuimon.instrument().enabled
    probe = state.probe
    timing = {}  # the probe's CommTiming and its CUDA module, set aside while an arm runs without them

    def arm(name: str):
        api.switch(probe, name != "off")
        for owner, attr, orig, _wrapper in torch_hooks._swaps:  # (probe-no<X>: that part's originals back)
            if attr in parts.get(name, ()):
                setattr(owner, attr, orig)
        comm = timing.setdefault("comm", probe.comm)
        timing.setdefault("cuda", comm.cuda if comm is not None else None)
        probe.gpu = timing.setdefault("gpu", probe.gpu) if name != "probe-nogpu" else None
        if comm is None or name == "off":
            return
        if name == "probe" or name in parts:
            comm.set_enabled(False)  # (its hooks on DDP's parameters come off too)
            probe.comm = None
        else:
            probe.comm = comm  # (its hooks go back on at the next DDP forward)
            comm.cuda = None if name == "comm-hooks" else timing["cuda"]  # (no CUDA: no event pairs)

    import torch
    import torch.distributed as dist
    from torch import nn

    cuda = a.device == "cuda"
    net, model, opt, x, y = ddp_job(a)
    rank, world = dist.get_rank(), dist.get_world_size()
    arm("comm")

    def steps(n):
        t0 = time.perf_counter()
        for _ in range(n):
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss.item()  # the host keeps pace with the GPU, as a loop that logs its loss
        return (time.perf_counter() - t0) / n * 1e3

    monitor = None
    if rank == 0 and not a.no_monitor:
        monitor = subprocess.Popen([sys.executable, "-m", "tuimon", "record", str(os.getpid()), "-o",
                                    os.path.join(tempfile.mkdtemp(), "bench.jsonl"), "--interval", "1"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        steps(a.warmup)
        blocks = {name: [] for name in arms}  # name -> per cycle [block ms/step, block ms/step]
        for _ in range(a.cycles):
            for name in arms + arms[::-1]:
                arm(name)
                steps(a.settle)  # (untimed: an arm's first steps pay for switching, which a job never does)
                blocks[name].append(steps(a.block_steps))
        arm("comm")
        monitored = "none" if monitor is None else "tuimon record on rank 0" + (
            "" if monitor.poll() is None else " (it stopped early)")
    finally:
        if monitor is not None:
            monitor.terminate()
            monitor.communicate(timeout=30)
    mine = {"rank": rank, "blocks": blocks, "records": probe.writer.records_written}
    if a.raw:
        with open(f"{a.raw}.rank{rank}.json", "w") as f:
            json.dump(mine, f)
    every = [None] * world
    dist.all_gather_object(every, mine)
    if rank == 0:
        print(f"DDP, {world} ranks, {'NCCL on ' + torch.cuda.get_device_name(0) if cuda else 'gloo on the CPU'}, MLP "
              f"{a.width}x{a.width}x{a.layers} ({sum(p.numel() for p in net.parameters()) / 1e6:.0f}M parameters), "
              f"batch {a.batch}; {a.cycles} cycles of {2 * len(arms)} blocks of {a.block_steps} steps; monitor: {monitored}")
        print(f"{'rank':<6}{'arm':<15}{'ms/step':>9}{'/ off':>8}{'cycle ratios p25..p75':>24}{'comm / probe':>14}"
              f"{'p25..p75':>18}")
        for r in every:
            for name in arms:
                print(f"{r['rank']:<6}{name:<15}" + _row(r["blocks"], name, "off")
                      + (_row(r["blocks"], "comm", "probe", ms=False) if name == "comm" and "probe" in arms else ""))
            print(f"{'':<6}records written: {r['records']}")
    dist.destroy_process_group()
    probe.writer.unlink()


def ddp_job(a):
    """The benchmark's DDP job (also benchmarks/probe_profile.py's): an MLP of a.width x a.width x
    a.layers under DDP, NCCL with one GPU per rank or gloo, an optimizer and one batch on the device."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    cuda = a.device == "cuda"
    local = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local)
    else:
        torch.set_num_threads(1)
    dist.init_process_group("nccl" if cuda else "gloo")
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    torch.manual_seed(0)
    net = nn.Sequential(*[m for _ in range(a.layers) for m in (nn.Linear(a.width, a.width), nn.ReLU())],
                        nn.Linear(a.width, 1)).to(dev)
    model = DDP(net, device_ids=[local] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    return net, model, opt, torch.randn(a.batch, a.width, device=dev), torch.randn(a.batch, 1, device=dev)


def _cycle_means(blocks: dict, name: str) -> list[float]:
    return [(u + v) / 2 for u, v in zip(blocks[name][0::2], blocks[name][1::2], strict=True)]


def _row(blocks: dict, name: str, ref: str, ms: bool = True) -> str:
    """The arm's median block, its ratio to the reference arm's, and the spread of the per-cycle ratios."""
    mine, theirs = _cycle_means(blocks, name), _cycle_means(blocks, ref)
    ratios = [u / v for u, v in zip(mine, theirs, strict=True)]
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    ratio = statistics.median(blocks[name]) / statistics.median(blocks[ref])
    return (f"{statistics.median(blocks[name]):>9.3f}" if ms else "") + f"{ratio:>8.4f}" + \
        f"{q[0]:>14.4f} .. {q[2]:.4f}"


if __name__ == "__main__":
    main()
