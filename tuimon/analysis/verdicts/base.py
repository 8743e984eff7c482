"""What every verdict module shares: Check, Rule and Verdict; a row of the table (VerdictClass);
the GPU activity measure the rules read (Context); and the small helpers that format shares and
test a value against its threshold (thresholds.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import NamedTuple

from ...model import HotLine
from ...model.record import record
from ...model.units import percent, share
from ...model.vocab import Confidence, RuleCode, VerdictCode
from .. import thresholds as T
from .evidence import Evidence


@record
class Check:
    what: str
    value: str  # as shown; "n/a" when not measured
    test: str  # e.g. ">= 20%"
    passed: bool | None  # None: could not be checked
    source: str = ""


@record
class Rule:
    code: RuleCode
    title: str
    fired: bool
    checks: list[Check]
    why: str  # one sentence: why it fired, or what it lacked


@record
class Verdict:
    code: VerdictCode
    headline: str
    evidence: str  # the numbers that decided it
    next_step: str
    confidence: Confidence
    rules: list[Rule] = field(default_factory=list)


class VerdictClass(NamedTuple):
    """One row of the table (verdicts/__init__.py): the rule, and the words once it fired."""

    rule: Callable[[Context], Rule]
    verdict: Callable[[Context, list[Rule]], Verdict]  # (every rule, as tried: the verdict shows them)


def at_least(what: str, value: float | None, t: T.Threshold, fmt: Callable[[float | None], str] = share) -> Check:
    return Check(what=what, value=fmt(value), test=f">= {t.show()}",
                 passed=None if value is None else value >= t.value, source=t.source)


def below(what: str, value: float | None, t: T.Threshold, fmt: Callable[[float | None], str] = share) -> Check:
    return Check(what=what, value=fmt(value), test=f"< {t.show()}",
                 passed=None if value is None else value < t.value, source=t.source)


def margin(value: float | None, t: T.Threshold, above: bool = True) -> Confidence:
    """high when the deciding number is clearly past its threshold (by a quarter), else medium."""
    if value is None:
        return "low"
    far = value >= t.value * 1.25 if above else value <= t.value * 0.75
    return "high" if far else "medium"


MODEL = ("forward", "backward", "optimizer")


def model_share(e: Evidence) -> float:
    """forward+backward+optimizer: the model's compute, one part as the verdicts name it."""
    return sum(e.window.phases.get(p, 0.0) for p in MODEL)


def largest_part(e: Evidence, besides: str) -> tuple[str, float]:
    """The largest part of the step besides one phase: the model's compute (forward+backward+
    optimizer) or any other phase."""
    parts = {"forward+backward+optimizer": model_share(e)}
    parts.update((p, v) for p, v in e.window.phases.items() if p not in MODEL and p != besides)
    return max(parts.items(), key=lambda kv: kv[1])


def outranked(e: Evidence, phase: str, value: float | None) -> Check:
    """Whether a moderate share holds: passed (it does) unless a part RANK_FACTOR times larger
    outranks it."""
    name, larger = largest_part(e, phase)
    test = f"< {T.RANK_FACTOR.show()} (a larger part decides)"
    if not value:  # (nothing to outrank)
        return Check(what=f"{name} over {phase}", value="n/a", test=test, passed=None, source=T.RANK_FACTOR.source)
    return Check(what=f"{name} over {phase}", value=f"{larger / value:.1f}x ({share(larger)})", test=test,
                 passed=larger < value * T.RANK_FACTOR.value, source=T.RANK_FACTOR.source)


def loop_cpu(e: Evidence) -> tuple[float | None, str]:
    """The loop thread's CPU with the time it waited for a core (on a busy machine it would have
    run then), and those in words."""
    h = e.host
    wait = h.loop_cpu_wait if h.loop_cpu_wait is not None and h.loop_cpu_wait >= 0.5 else 0.0
    if h.loop_cpu is None:
        return None, "loop thread CPU not read yet"
    return h.loop_cpu + wait, f"loop thread at {h.loop_cpu:.0f}% CPU" + (f" + {wait:.0f}% waiting for a core" if wait else "")


def blocked_share(hot: list[HotLine], phase: str) -> float | None:
    """Of a phase's samples, the share the loop thread spent blocked in calls (None: no samples)."""
    n = sum(h.samples for h in hot if h.phase == phase)
    return sum(h.samples * h.waiting for h in hot if h.phase == phase) / n if n else None


def optimizer_step(e: Evidence, opt: float) -> str:
    """What speeds up an optimizer step that dominates, from how it steps (the probe read its
    settings, and torch's own choice where it was left to torch)."""
    desc = e.window.optimizer or ""
    if "fused=True" in desc:
        return (f"optimizer.step() is {share(opt)} of the step though fused ({desc}): fewer, larger parameters, or "
                "CUDA graphs around the step (torch.compile)")
    if "foreach=False" in desc:
        return (f"optimizer.step() is {share(opt)} of the step and updates its parameters one by one ({desc}): "
                "foreach=True (one kernel per group of tensors), or fused=True on CUDA (Adam, AdamW, SGD)")
    return (f"optimizer.step() is {share(opt)} of the step ({desc or 'its settings unknown'}): fused=True on CUDA "
            "(Adam, AdamW, SGD), or torch.compile of the step")


class Context:
    """What several rules share: the evidence, the GPU activity measure (and which one it is), and
    the GPU's busiest compute pipe."""

    def __init__(self, e: Evidence) -> None:
        self.e = e
        g = e.gpu
        self.busy: float | None  # % (None: not measured)
        if g.sm_active is not None:
            self.busy, self.busy_name, self.busy_note = g.sm_active, "SM activity", ""
        elif g.util_gpu is not None:  # kernel-running time: a GPU running one tiny kernel reads 100%
            self.busy, self.busy_name, self.busy_note = g.util_gpu, "GPU util (coarse)", " (coarse: no GPM)"
        elif g.busy_events is not None:
            self.busy, self.busy_name = 100 * g.busy_events, "GPU busy (CUDA events, a lower bound)"
            self.busy_note = ""
        else:
            self.busy, self.busy_name, self.busy_note = None, "GPU activity", " (no GPU metrics)"
        compute = [(v, n) for v, n in ((g.tensor_active, "tensor"), (g.fp32_active, "FP32"), (g.fp16_active, "FP16"))
                   if v is not None]
        self.compute: float | None
        self.compute, self.compute_name = max(compute) if compute else (None, "compute")

    @property
    def guessed_gpu(self) -> bool:
        """No GPM: the GPU's side is guessed (a coarse measure, or none)."""
        return self.busy is None or bool(self.busy_note)

    def busy_check(self, t: T.Threshold = T.GPU_BUSY) -> Check:
        return at_least(self.busy_name, self.busy, t, percent)

    def gpu_words(self) -> str:
        return f"{self.busy_name} {percent(self.busy)}{self.busy_note}"

    def units(self) -> str:
        """' · DRAM 17% · tensor 93%' where GPM measured them, else nothing."""
        return f" · DRAM {percent(self.e.gpu.dram_bw)} · {self.compute_name} {percent(self.compute)}" if not self.busy_note else ""
