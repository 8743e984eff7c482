"""Where the probe's time goes in a training step, by function (cProfile), on the step of
ddp_step_overhead.py (the costliest case for the probe: a short, host-bound DDP step).

    torchrun --nproc-per-node 1 benchmarks/probe_profile.py [--device cuda] [--steps 2000] [--top 30]

Runs the steps with the probe on under cProfile and prints the probe's functions (tuimon/ and the
torch calls made from them) by their own time, and their sum per step. cProfile adds ~1 us to every
call, so the sum overstates; the ranking says what to make cheaper, benchmarks/ddp_step_overhead.py
what it costs."""

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    a = ap.parse_args()
    os.environ.setdefault("TUIMON_SHM_DIR", tempfile.mkdtemp())

    import tuimon
    from tuimon.probe import state

    assert tuimon.instrument().enabled
    probe = state.probe
    import torch
    import torch.distributed as dist
    from torch import nn

    from benchmarks.ddp_step_overhead import ddp_job

    cuda = a.device == "cuda"
    _net, model, opt, x, y = ddp_job(a)

    def steps(n):
        for _ in range(n):
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss.item()

    steps(100)
    prof = cProfile.Profile()
    prof.enable()
    steps(a.steps)
    prof.disable()
    stats = pstats.Stats(prof)
    mine = {k: v for k, v in stats.stats.items() if "tuimon" in k[0]}
    from tuimon.probe import torch_hooks

    wrapped = {getattr(orig, "__name__", "") for _owner, _name, orig, _wrapper in torch_hooks._swaps}
    called = {}  # (callee) -> own time of non-tuimon functions called from tuimon's, but the originals it wraps
    for callee, (_cc, _nc, _tt, _ct, callers) in stats.stats.items():
        if "tuimon" in callee[0] or callee[2] in wrapped or any(f".{w} " in callee[2] or f"'{w}'" in callee[2]
                                                               for w in wrapped):
            continue
        for caller, (_c, _n, tt, _t) in callers.items():
            if "tuimon" in caller[0]:
                called[callee] = called.get(callee, 0.0) + tt
    rows = [(v[2], v[1], f"{os.path.relpath(k[0]) if 'tuimon' in k[0] else k[0]}:{k[1]}({k[2]})") for k, v in mine.items()]
    rows += [(tt, stats.stats[k][1], f"  called from tuimon: {k[2]} {os.path.basename(k[0])}") for k, tt in called.items()]
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    name = torch.cuda.get_device_name(0) if cuda else "CPU"
    print(f"probe's own time under cProfile, DDP step on {name}, {a.steps} steps: {total / a.steps * 1e6:.1f} us/step")
    print(f"{'us/step':>8}{'calls/step':>11}  function")
    for tt, n, where in rows[:a.top]:
        print(f"{tt / a.steps * 1e6:>8.2f}{n / a.steps:>11.2f}  {where}")
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(12)
    print(out.getvalue()[-3000:])
    dist.destroy_process_group()
    probe.writer.unlink()


if __name__ == "__main__":
    main()
