"""The GPU busy (SM >= 80%): memory-bound | compute-bound | healthy, by which unit leads (Nsight
Compute's speed-of-light logic applied to GPM's DRAM and pipe activity). Three classes, three rows:
memory-bound and compute-bound are tried first, healthy (busy, no unit leading) after them."""

from __future__ import annotations

from ...model.vocab import RuleCode
from .. import thresholds as T
from .base import Check, Context, Rule, Verdict, VerdictClass, at_least, margin, percent, share


def _lead(what: str, lead: float | None) -> Check:
    """One unit over the other, in points of activity."""
    return Check(what=what, value="n/a" if lead is None else f"{lead:+.0f} points", test=f">= +{T.UNIT_LEAD.show()}",
                 passed=None if lead is None else lead >= T.UNIT_LEAD.value, source=T.UNIT_LEAD.source)


def _lead_dram(c: Context) -> float | None:
    dram = c.e.gpu.dram_bw
    return None if dram is None or c.compute is None else dram - c.compute


def _rule(c: Context, code: RuleCode, title: str, checks: list[Check]) -> Rule:
    busy = checks[0]
    if busy.passed is None:
        why = "GPU activity not measured (no GPU metrics): the GPU's side cannot be judged"
    elif busy.passed:
        why = f"{c.gpu_words()}; DRAM {percent(c.e.gpu.dram_bw)}, {c.compute_name} {percent(c.compute)}"
    else:
        why = f"{c.gpu_words()} is under {T.GPU_BUSY.show()}: the GPU is not the bottleneck"
    return Rule(code=code, title=title, fired=all(ch.passed for ch in checks), checks=checks, why=why)


def rule_memory(c: Context) -> Rule:
    lead = _lead_dram(c)
    return _rule(c, "memory-bound", "GPU memory-bound (DRAM)",
                 [c.busy_check(), at_least("DRAM bandwidth", c.e.gpu.dram_bw, T.UNIT_BOUND, percent),
                  _lead(f"DRAM over {c.compute_name}", lead)])


def rule_compute(c: Context) -> Rule:
    lead = _lead_dram(c)
    return _rule(c, "compute-bound", "GPU compute-bound",
                 [c.busy_check(), at_least(f"{c.compute_name} pipe activity", c.compute, T.UNIT_BOUND, percent),
                  _lead(f"{c.compute_name} over DRAM", None if lead is None else -lead)])


def rule_healthy(c: Context) -> Rule:
    """Busy, after memory- and compute-bound in precedence."""
    return _rule(c, "healthy", "Healthy (GPU busy, no unit saturated)", [c.busy_check()])


def verdict_memory(c: Context, rules: list[Rule]) -> Verdict:
    g = c.e.gpu
    return Verdict(code="memory-bound", headline="GPU memory-bound",
                   evidence=f"{c.gpu_words()} · DRAM {percent(g.dram_bw)} · {c.compute_name} {percent(c.compute)}",
                   next_step=f"DRAM {percent(g.dram_bw)} while tensor {percent(g.tensor_active)} and FP32 "
                             f"{percent(g.fp32_active)}: the kernels move bytes more than they compute: fuse elementwise "
                             "ops (torch.compile), bf16 to halve the bytes, larger batches",
                   confidence=margin(g.dram_bw, T.UNIT_BOUND), rules=rules)


def verdict_compute(c: Context, rules: list[Rule]) -> Verdict:
    if c.compute_name == "tensor":
        step = (f"tensor cores {percent(c.compute)} busy: the math itself is the limit: FP8 (Transformer Engine), "
                "fewer FLOPs, or a larger GPU")
    else:
        step = (f"{c.compute_name} pipes {percent(c.compute)} busy, tensor cores {percent(c.e.gpu.tensor_active)}: move the "
                "math to tensor cores (bf16 autocast, or TF32: torch.backends.cuda.matmul.allow_tf32 = True)")
    return Verdict(code="compute-bound", headline=f"GPU compute-bound ({c.compute_name})",
                   evidence=f"{c.gpu_words()} · {c.compute_name} {percent(c.compute)} · DRAM {percent(c.e.gpu.dram_bw)}",
                   next_step=step, confidence=margin(c.compute, T.UNIT_BOUND), rules=rules)


def verdict_healthy(c: Context, rules: list[Rule]) -> Verdict:
    return Verdict(code="healthy", headline="healthy: the GPU is busy",
                   evidence=f"{c.gpu_words()}{c.units()} · data wait {share(c.e.window.data_share)}",
                   next_step="nothing in the loop to fix; kernel efficiency is Nsight Compute's job: c captures the "
                             "top kernels" + ("" if not c.busy_note else "; without GPM this GPU's busy time is coarse"),
                   confidence="low" if c.guessed_gpu else margin(c.busy, T.GPU_BUSY), rules=rules)


MEMORY = VerdictClass(rule=rule_memory, verdict=verdict_memory)
COMPUTE = VerdictClass(rule=rule_compute, verdict=verdict_compute)
HEALTHY = VerdictClass(rule=rule_healthy, verdict=verdict_healthy)
