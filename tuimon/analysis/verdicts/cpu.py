"""cpu-bound: no CUDA work in the job: forward+backward+optimizer take most of the step and the
loop thread runs near a full core: the model computes on the CPU. More of its cores if the ops run
on one, else a GPU or fewer, fused ops."""

from __future__ import annotations

from .. import thresholds as T
from .base import (
    Check,
    Context,
    Rule,
    Verdict,
    VerdictClass,
    at_least,
    below,
    loop_cpu,
    margin,
    model_share,
    optimizer_step,
    percent,
    share,
)


def rule(c: Context) -> Rule:
    e, cuda = c.e, c.e.gpu.cuda
    no_cuda = Check(what="CUDA work of the job (CUDA events, allocator, NVML)",
                    value="n/a" if cuda is None else "seen" if cuda else "none seen", test="none",
                    passed=None if cuda is None else not cuda)
    idle = below(c.busy_name, c.busy, T.GPU_IDLE, percent)
    model = model_share(e) if e.window.phases else None
    compute = at_least("forward+backward+optimizer", model, T.MODEL_MAJORITY)
    wants, _ = loop_cpu(e)
    loop = at_least("loop thread CPU (+ waiting for a core)", wants, T.LOOP_CPU_BUSY, percent)
    fired = bool(no_cuda.passed) and idle.passed is not False and bool(compute.passed) and bool(loop.passed)
    if fired:
        why = f"no CUDA work; forward+backward+optimizer {share(model)} of the step with the loop thread at {percent(wants)}"
    elif cuda is not False:
        why = "the job runs CUDA work: the GPU rules judge it" if cuda else "whether the job runs CUDA work is not known"
    else:
        why = (f"no CUDA work; forward+backward+optimizer {share(model)} of the step, loop thread {percent(wants)}: "
               "not both at their bars")
    return Rule(code="cpu-bound", title="CPU-bound (the model computes on the CPU)", fired=fired,
                checks=[no_cuda, idle, compute, loop], why=why)


def verdict(c: Context, rules: list[Rule]) -> Verdict:
    e, h = c.e, c.e.host
    phases = e.window.phases
    model = model_share(e)
    _, cpu = loop_cpu(e)
    cores = f" of {h.cpus} cores" if h.cpus else ""
    process = f" · the process at {h.job_cpu:.0f}% CPU{cores}" if h.job_cpu is not None else ""
    data = f" · data wait {share(e.window.data_share)}" if e.window.data_share else ""
    evidence = f"forward+backward+optimizer {share(model)} of the step · {cpu}{process}{data} · no CUDA work"
    confidence = margin(model, T.MODEL_MAJORITY)
    opt = phases.get("optimizer", 0.0)
    if opt and opt == max(phases.get(p, 0.0) for p in ("forward", "backward", "optimizer")):  # the model's largest part
        optimizer = e.window.optimizer
        return Verdict(code="cpu-bound", headline="CPU-bound: the optimizer step",
                       evidence=f"optimizer {share(opt)} of the step · {evidence}" + (f" · {optimizer}" if optimizer else ""),
                       next_step=optimizer_step(e, opt), confidence=confidence, rules=rules)
    alone = (h.job_cpu is not None and h.loop_cpu is not None
             and h.job_cpu - h.loop_cpu < T.INTRA_OP_IDLE.value and (h.cpus or 0) > 1)
    if alone:
        step = (f"the ops run on the loop thread alone (the process at {h.job_cpu:.0f}% CPU{cores}): more intra-op "
                "threads, torch.set_num_threads(N) (OMP_NUM_THREADS / MKL_NUM_THREADS may have set 1), up to the "
                "cores the DataLoader workers leave; beyond that a GPU (model.to('cuda')), or torch.compile to fuse "
                "the CPU ops")
    else:
        step = ("the model's arithmetic on the CPU is the limit: a GPU (model.to('cuda')) if there is one; else "
                "torch.compile (fused CPU kernels), bf16 autocast on CPUs with AMX / AVX-512 BF16, fewer FLOPs; "
                "torch.get_num_threads() against the cores the job has")
    return Verdict(code="cpu-bound", headline="CPU-bound: the model's compute", evidence=evidence, next_step=step,
                   confidence=confidence, rules=rules)


CLASS = VerdictClass(rule=rule, verdict=verdict)
