"""What the probe, comm timing included, costs a DDP step (issue 11's budget: <= 1% of the step).

    torchrun --nproc-per-node 2 benchmarks/ddp_step_overhead.py [--device cuda] [--pairs 12]
        [--block-steps 50] [--width 4096] [--layers 8] [--batch 64] [--no-monitor] [--no-comm]

Each rank trains an MLP (width x width x layers) under DistributedDataParallel (NCCL on GPUs, one
per rank; gloo on the CPU). The probe is instrumented once; blocks of steps then alternate between
the probe on and off (every wrapper and hook swapped back: torch_hooks.set_enabled, as in
step_overhead.py) in on-off-off-on order, the same on every rank, so the ranks stay in step and
slow drifts cancel. Alternating inside one job, not between jobs: two launches of the same DDP job
differed by up to 18% on two H200s (tests/gpu/check_ranks.sh, part C), far above a 1% budget.
`tuimon record` watches rank 0 (and so every rank) the whole time. Rank 0 prints the table: the
median block's step time on and off per rank, their ratio, the spread of the per-pair ratios.
"""

import argparse
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
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--block-steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--no-monitor", action="store_true", help="the probe alone (on a machine with fewer cores than ranks + 1)")
    ap.add_argument("--no-comm", action="store_true", help="the probe without its comm timing: what comm timing adds")
    a = ap.parse_args()
    os.environ.setdefault("TUIMON_SHM_DIR", tempfile.mkdtemp())

    import tuimon
    from tuimon.probe import api

    assert tuimon.instrument().enabled
    probe = api._probe

    def probe_on(on: bool):
        api.switch(probe, on)
        if on and a.no_comm and probe.comm is not None:
            probe.comm.set_enabled(False)  # (its hooks on DDP's parameters off too)
            probe.comm = None  # (installing the probe gives it its comm timing again)

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
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    torch.manual_seed(0)
    net = nn.Sequential(*[m for _ in range(a.layers) for m in (nn.Linear(a.width, a.width), nn.ReLU())],
                        nn.Linear(a.width, 1)).to(dev)
    model = DDP(net, device_ids=[local] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    probe_on(True)
    x = torch.randn(a.batch, a.width, device=dev)
    y = torch.randn(a.batch, 1, device=dev)

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
        on, off = [], []
        for _ in range(a.pairs):
            for state in (True, False, False, True):
                probe_on(state)
                (on if state else off).append(steps(a.block_steps))
        probe_on(True)
        monitored = "none" if monitor is None else "tuimon record on rank 0" + (
            "" if monitor.poll() is None else " (it stopped early)")
    finally:
        if monitor is not None:
            monitor.terminate()
            monitor.communicate(timeout=30)
    mine = {"rank": rank, "on": on, "off": off, "records": probe.writer.records_written,
            "comm_timing": getattr(probe, "comm", None) is not None}
    every = [None] * world
    dist.all_gather_object(every, mine)
    if rank == 0:
        print(f"DDP, {world} ranks, {'NCCL on ' + torch.cuda.get_device_name(0) if cuda else 'gloo on the CPU'}, MLP "
              f"{a.width}x{a.width}x{a.layers} ({sum(p.numel() for p in net.parameters()) / 1e6:.0f}M parameters), "
              f"batch {a.batch}; {len(on)} blocks of {a.block_steps} steps each way; monitor: {monitored}; "
              f"comm timing {'off' if a.no_comm else 'on'}")
        print(f"{'rank':<6}{'off ms/step':>12}{'on ms/step':>12}{'on/off':>9}{'pair ratio p25..p75':>24}"
              f"{'records':>10}  comm timing")
        for r in every:
            ratios = [p / q for p, q in zip(r["on"], r["off"], strict=True)]
            q = statistics.quantiles(ratios, n=4)
            m_on, m_off = statistics.median(r["on"]), statistics.median(r["off"])
            print(f"{r['rank']:<6}{m_off:>12.3f}{m_on:>12.3f}{m_on / m_off:>9.4f}{q[0]:>14.4f} .. {q[2]:.4f}"
                  f"{r['records']:>10}  {r['comm_timing']}")
    dist.destroy_process_group()
    probe.writer.unlink()


if __name__ == "__main__":
    main()
