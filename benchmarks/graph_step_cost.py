"""What the probe costs a short, host-bound step, line by line: tests/workloads/cuda_graphs.py's forward
loop (a captured backbone replayed, an eager head; ~0.65 ms steps of ~15 torch calls on an H200 host),
captured once with the probe on, then timed by its lines with the probe on and off in on-off-off-on
blocks (issue 43 item 1: the loop's step count under tuimon within 2% of a plain run's).

    python benchmarks/graph_step_cost.py [--rounds 8] [--block-steps 600]

The table: each line's wall and loop-thread CPU time a step, probe on / off / the difference (means over
all the blocks: the rare steps the probe measures count at their rate), and the whole step's ratio with
its per-round spread. A line whose call the probe wraps or hooks (the copy, the head's forward, backward,
the optimizer's step, which ends the step) carries the probe's work. A line it does not touch moves by
the host's noise, but the sync every 100th step moves by how far the GPU is behind: host time the probe
adds while the GPU is busy comes back there as a shorter wait. CUDA only."""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "workloads"))

LINES = ("randn, copy_", "graph.replay()", "zero_grad()", "head(feat)", "cross_entropy", "backward()",
         "optimizer.step()", "item() / 100")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8, help="on-off-off-on rounds")
    ap.add_argument("--block-steps", type=int, default=600)
    a = ap.parse_args()
    import tempfile

    os.environ.setdefault("TUIMON_SHM_DIR", tempfile.mkdtemp())
    import tuimon
    from tuimon.probe import api, state

    assert tuimon.instrument().enabled
    probe = state.probe

    import torch
    from cuda_graphs import ForwardLoop
    from torch import nn

    loop = ForwardLoop(capture_at=20)
    for _ in range(300):  # (the warm-up, the capture at step 20 with the probe on, the GPU timing's stride)
        loop.step()
    clock, cpu = time.perf_counter_ns, time.thread_time_ns
    n = len(LINES)

    def block(steps: int) -> list[list[int]]:
        """steps steps of the captured loop; per line [wall ns, cpu ns] summed; the whole step last.
        The lines are ForwardLoop.step's after its capture, written out to time each: keep them its."""
        sums = [[0, 0] for _ in range(n + 1)]
        for i in range(steps):
            t = [(clock(), cpu())]
            loop.static_in.copy_(torch.randn(256, 2048, device=loop.dev))
            t.append((clock(), cpu()))
            loop.graph.replay()
            t.append((clock(), cpu()))
            loop.opt.zero_grad(set_to_none=True)
            t.append((clock(), cpu()))
            out = loop.head(loop.static_feat)
            t.append((clock(), cpu()))
            loss = nn.functional.cross_entropy(out, loop.target)
            t.append((clock(), cpu()))
            loss.backward()
            t.append((clock(), cpu()))
            loop.opt.step()
            t.append((clock(), cpu()))
            if i % 100 == 0:
                loss.item()
            t.append((clock(), cpu()))
            for k in range(n):
                sums[k][0] += t[k + 1][0] - t[k][0]
                sums[k][1] += t[k + 1][1] - t[k][1]
            sums[n][0] += t[n][0] - t[0][0]
            sums[n][1] += t[n][1] - t[0][1]
        return sums

    on: list[list[list[int]]] = []
    off: list[list[list[int]]] = []
    for _ in range(a.rounds):
        for st in (True, False, False, True):
            api.switch(probe, st)
            (on if st else off).append(block(a.block_steps))
    api.switch(probe, True)
    steps_each = len(on) * a.block_steps

    def mean_us(blocks: list[list[list[int]]], k: int, j: int) -> float:
        return sum(b[k][j] for b in blocks) / steps_each / 1e3

    print(f"device {torch.cuda.get_device_name(0)}, {a.rounds} rounds of on-off-off-on blocks of {a.block_steps} "
          f"steps ({steps_each} steps each way); GPU timing every {probe.gpu.every if probe.gpu else '-'} steps")
    print(f"{'us a step (mean)':<18}{'wall on':>9}{'off':>9}{'extra':>8}{'cpu on':>9}{'off':>9}{'extra':>8}")
    for k, name in enumerate((*LINES, "the step")):
        w1, w0, c1, c0 = mean_us(on, k, 0), mean_us(off, k, 0), mean_us(on, k, 1), mean_us(off, k, 1)
        print(f"{name:<18}{w1:>9.1f}{w0:>9.1f}{w1 - w0:>+8.1f}{c1:>9.1f}{c0:>9.1f}{c1 - c0:>+8.1f}")
    # each round: its two on blocks against its two off blocks
    ratios = [(on[2 * r][n][0] + on[2 * r + 1][n][0]) / (off[2 * r][n][0] + off[2 * r + 1][n][0])
              for r in range(a.rounds)]
    print(f"the step, on / off: {mean_us(on, n, 0) / mean_us(off, n, 0):.4f}; per round {min(ratios):.4f} .. "
          f"{max(ratios):.4f} (median {statistics.median(ratios):.4f})")
    probe.writer.unlink()


if __name__ == "__main__":
    main()
