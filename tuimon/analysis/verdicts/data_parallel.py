"""data-parallel: the model runs under torch.nn.DataParallel on 2+ GPUs, and its own work on the
loop thread (replicating the model, scattering the inputs, gathering the outputs) holds >= 10% of
the step, or the GPUs are mostly idle (SM < 50%, or not measured: as host-bound reads it): one process drives every GPU, the replicas'
Python shares one interpreter, and the loop waits in their join. PyTorch's own advice is
DistributedDataParallel, one process per GPU (DataParallel's documentation). Tried after the GPU's
own classes (a busy GPU hides the host's work) and before the host's moderate waits and host-bound,
whose "launches and Python in the model" is, under DataParallel, its replicas' Python.
(probe/data_parallel.py measures the parts; thresholds.py DP_DEVICES, DP_OWN, GPU_IDLE: why these bars.)"""

from __future__ import annotations

from .. import thresholds as T
from .base import Check, Context, Rule, Verdict, VerdictClass, at_least, below, margin, percent, share


def _gpus(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0f}"


def rule(c: Context) -> Rule:
    dp = c.e.window.data_parallel
    devices = at_least("GPUs torch.nn.DataParallel runs on (its device_ids)", dp.devices if dp else None,
                       T.DP_DEVICES, _gpus)
    own = at_least("DataParallel's own work on the loop thread (replicate, scatter, gather)",
                   dp.own_share if dp else None, T.DP_OWN)
    idle = below(c.busy_name, c.busy if dp else None, T.GPU_IDLE, percent)
    # (GPU activity not measured reads as host-bound reads it: not known busy; so under DataParallel this
    # rule takes every case host-bound would, whose launches and Python are then the replicas')
    fired = bool(devices.passed) and (bool(own.passed) or idle.passed is not False)
    checks: list[Check] = [devices, own, idle]
    if dp is None:
        why = "no torch.nn.DataParallel in the window's steps"
    elif not devices.passed:
        why = f"DataParallel on {dp.devices} GPU: it calls the module itself"
    else:
        why = (f"DataParallel on {dp.devices} GPUs: replicate, scatter and gather {share(dp.own_share)} of the step, "
               f"{c.gpu_words()}" + ("" if fired else f": under {T.DP_OWN.show()} with the GPUs not idle"))
    return Rule(code="data-parallel", title="DataParallel (one process drives every GPU)", fired=fired,
                checks=checks, why=why)


def verdict(c: Context, rules: list[Rule]) -> Verdict:
    """Its measured cost, as shares of the step, and DistributedDataParallel."""
    dp = c.e.window.data_parallel
    assert dp is not None  # (the rule fired on it)
    gpu = (f"the replicas' forward {dp.gpu_ms:.1f} ms on their own GPUs' streams (the slowest; CUDA events, "
           f"{dp.gpu_steps} steps)" if dp.gpu_ms is not None else
           "GPU time on the replicas' streams: unknown (no CUDA events on them yet)")
    evidence = (f"replicate {share(dp.replicate_share)} ({dp.replicate_ms:.1f} ms) · scatter+gather "
                f"{share(dp.scatter_gather_share)} ({dp.scatter_ms + dp.gather_ms:.1f} ms) · waiting in the replicas' "
                f"join (parallel_apply) {share(dp.apply_share)} ({dp.apply_ms:.1f} ms) of the step · {c.gpu_words()} · "
                f"{gpu}")
    step = (f"DistributedDataParallel, one process per GPU (torchrun --nproc_per_node={dp.devices} with "
            "torch.nn.parallel.DistributedDataParallel and a DistributedSampler): PyTorch's own advice (DataParallel's "
            "documentation: 'It is recommended to use DistributedDataParallel, instead of this class, to do multi-GPU "
            "training, even if there is only a single node'): no model replicated every step, no inputs scattered "
            "from and outputs gathered to one GPU, no replicas' Python sharing one interpreter's GIL "
            "(the gradients' reduction to the first GPU in backward is not in these numbers)")
    own = dp.own_share
    confidence = margin(own, T.DP_OWN) if own >= T.DP_OWN.value else margin(c.busy, T.GPU_IDLE, above=False)
    return Verdict(code="data-parallel",
                   headline=f"DataParallel on {dp.devices} GPUs: replicate, scatter, gather {share(own)} and the "
                            f"replicas' join {share(dp.apply_share)} of the step",
                   evidence=evidence, next_step=step, confidence=confidence, rules=rules)


CLASS = VerdictClass(rule=rule, verdict=verdict)
