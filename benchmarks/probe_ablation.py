"""What each part of the probe costs a real training step: the probe on (with one part off) against
the probe off, for each part in turn (budget: all of it <= 1%).

    python benchmarks/probe_ablation.py [--pairs 12] [--block-steps 50] [--device auto] [--model demo|resnet50]

The step and the attached monitor are benchmarks/step_overhead.py's. Each round runs, for each
variant (all on; without GPU timing, the copy accounting, the op counter or the line sampler; without
one group of wrappers: next(), backward, the syncs, the copies, the roots' forward timing, the optimizer wrapper
(which end the steps: the step boundary's work goes with them)), blocks of steps with the probe on in that variant and off, in on-off-off-on
order; the table: each variant's median ratio on/off and its p25..p75. A part costs about the
difference between "all on" and the variant without it (within the spread)."""

import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_overhead  # noqa: E402


def main():
    a = step_overhead.args()
    probe, probe_on, steps, net, batch, device, cuda = step_overhead.training(a)
    monitor = subprocess.Popen([sys.executable, "-m", "tuimon", "record", str(os.getpid()), "-o",
                                os.path.join(tempfile.mkdtemp(), "bench.jsonl"), "--interval", "1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    full = {"gpu": probe.gpu, "copies": probe.copies, "ops": probe.ops}

    from tuimon.probe import torch_hooks

    def unwrap(*names):
        for owner, name, orig, _ in torch_hooks._swaps:
            if name in names:
                setattr(owner, name, orig)

    def variant(name):
        torch_hooks.set_enabled(True)
        for k, v in full.items():
            setattr(probe, k, v)
        if probe.sampler is not None:
            probe.sampler.pause(False)
        if name == "no gpu timing":
            probe.gpu = None
        elif name == "no copies":
            probe.copies = None
        elif name == "no op counter":
            probe.ops = None
        elif name == "no sampler" and probe.sampler is not None:
            probe.sampler.pause(True)
        elif name == "no next() wrapper":
            unwrap("__next__")
        elif name == "no backward wrapper":
            unwrap("backward", "grad")
        elif name == "no sync wrappers":
            unwrap("item", "tolist", "cpu", "__bool__", "__int__", "__float__", "synchronize")
        elif name == "no copy wrappers":
            unwrap("to", "cuda", "copy_")
        elif name == "no forward timing":
            probe.roots.set_enabled(False)
        elif name == "no optimizer wrapper":  # (no step ends either: the boundary's work goes too)
            torch_hooks._enabled = False  # (the classes' wrappers only call through; set_enabled(True) resets it)

    names = ["all on", "no gpu timing", "no copies", "no op counter", "no sampler", "no next() wrapper",
             "no backward wrapper", "no sync wrappers", "no copy wrappers", "no forward timing", "no optimizer wrapper"]
    if a.variants:
        names = ["all on", *(n for n in names if n in a.variants.split(",") and n != "all on")]
    ratios = {n: [] for n in names}
    cpu_us = {n: [] for n in names}  # the loop thread's own CPU a step, on minus off
    try:
        steps(a.warmup)
        for _ in range(a.pairs):
            for n in names:
                on = off = cpu = 0.0
                for st in (True, False, False, True):
                    probe_on(st)
                    if st:
                        variant(n)
                    ms = steps(a.block_steps)
                    if st:
                        on += ms
                    else:
                        off += ms
                    cpu += steps.cpu_ms * (1e3 if st else -1e3) / 2
                ratios[n].append(on / off)
                cpu_us[n].append(cpu)
        probe_on(True)
        variant("all on")
    finally:
        monitor.terminate()
        monitor.communicate(timeout=30)
    print(f"device {device}, model {a.model}, {a.pairs} rounds; each: probe on (the variant) / off, on-off-off-on")
    for n in names:
        q = statistics.quantiles(ratios[n], n=4)
        mean, half = step_overhead.mean_ci(ratios[n])
        print(f"{n:<16} median {statistics.median(ratios[n]):.4f}  p25..p75 {q[0]:.4f} .. {q[2]:.4f}  "
              f"mean {mean:.4f} ±{half:.4f}  loop CPU +{statistics.median(cpu_us[n]):.0f} us a step")
    probe.writer.unlink()


if __name__ == "__main__":
    main()
