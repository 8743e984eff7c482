"""Where the probe's cost lands in a real training step: the step of benchmarks/step_overhead.py
timed by its parts on the host (next(), the copies, forward, backward, the optimizer step, the sync,
the count), the probe on against off, in on-off-off-on blocks; on a GPU also on the GPU's clock (a
CUDA event recorded at each part's end, in both arms: what each part's interval lasted on the GPU).

    python benchmarks/step_segments.py [--pairs 12] [--block-steps 50] [--device auto] [--model demo|resnet50]

Why: the step's end-to-end ratio (step_overhead.py) says how much, not where. On a GPU a host part
that runs while the GPU is busy costs the step nothing (the sync waits less); a part that runs while
the GPU is idle (between the sync's return and the first copy) costs it all. The table: per part,
the median host time with the probe on and off and the extra, and the sum (the step's extra). On the
GPU's clock a part's interval is the longer of its host time and the GPU work queued before it: a
part whose extra shows there is on the step's critical path (the GPU waited for the host)."""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_overhead  # noqa: E402

PARTS = ("next()", "copies", "forward", "backward", "optimizer", "sync", "count")


def main():
    a = step_overhead.args()
    if a.model == "graph-forward":
        raise SystemExit("step_segments.py times the demo step's parts; the graph loop's: benchmarks/graph_step_cost.py")
    probe, probe_on, steps, net, batch, device, cuda = step_overhead.training(a)
    import torch
    from torch import nn

    import tuimon

    opt, batches = steps.opt, steps.batches
    clock = time.perf_counter_ns

    marks = [[torch.cuda.Event(enable_timing=True) for _ in range(len(PARTS) + 1)]
             for _ in range(a.block_steps if cuda else 0)]

    def mark(step: int, k: int) -> None:
        if cuda:
            marks[step][k].record()

    def timed(n: int) -> list[float]:
        """n steps; the median ns of each part on the host, then (on a GPU) on the GPU's clock."""
        parts: list[list[int]] = [[] for _ in PARTS]
        for s in range(n):
            mark(s, 0)
            t0 = clock()
            x, y = next(batches)
            t1 = clock()
            mark(s, 1)
            with tuimon.range("h2d"):
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            t2 = clock()
            mark(s, 2)
            with tuimon.range("forward"):
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
                    loss = nn.functional.cross_entropy(net(x), y)
            t3 = clock()
            mark(s, 3)
            with tuimon.range("backward"):
                opt.zero_grad(set_to_none=True)
                loss.backward()
            t4 = clock()
            mark(s, 4)
            with tuimon.range("optimizer"):
                opt.step()
            t5 = clock()
            mark(s, 5)
            if cuda:
                with tuimon.range("sync"):
                    torch.cuda.synchronize()
            t6 = clock()
            mark(s, 6)
            tuimon.count("samples", batch)
            t7 = clock()
            mark(s, 7)
            for i, d in enumerate((t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6)):
                parts[i].append(d)
        out = [statistics.median(p) for p in parts]
        if cuda and n == a.block_steps:
            torch.cuda.synchronize()
            for i in range(len(PARTS)):
                out.append(statistics.median(m[i].elapsed_time(m[i + 1]) * 1e6 for m in marks[:n]))
        return out

    timed(a.warmup)
    on: list[list[float]] = []
    off: list[list[float]] = []
    for _ in range(a.pairs):
        for st in (True, False, False, True):
            probe_on(st)
            (on if st else off).append(timed(a.block_steps))
    probe_on(True)
    print(f"device {device}{' ' + torch.cuda.get_device_name(0) if cuda else ''}, model {a.model}, "
          f"{len(on)} blocks of {a.block_steps} steps each way (median of each part in a block, then of the blocks)")
    table(on, off, 0, "host")
    if cuda:
        table(on, off, len(PARTS), "GPU clock")
    probe.writer.unlink()


def table(on, off, first: int, clock: str) -> None:
    print(f"{'part, ' + clock:<20}{'off us':>10}{'on us':>10}{'extra us':>10}{'extra p25..p75':>20}")
    tot_on = tot_off = 0.0
    for i, name in enumerate(PARTS, start=first):
        m_on = statistics.median(b[i] for b in on) / 1e3
        m_off = statistics.median(b[i] for b in off) / 1e3
        extras = [(x[i] - y[i]) / 1e3 for x, y in zip(on, off, strict=True)]
        q = statistics.quantiles(extras, n=4)
        tot_on, tot_off = tot_on + m_on, tot_off + m_off
        print(f"{name:<20}{m_off:>10.1f}{m_on:>10.1f}{m_on - m_off:>+10.1f}{q[0]:>+11.1f} .. {q[2]:+.1f}")
    print(f"{'sum':<20}{tot_off:>10.1f}{tot_on:>10.1f}{tot_on - tot_off:>+10.1f}   ({tot_on / tot_off:.4f})")


if __name__ == "__main__":
    main()
