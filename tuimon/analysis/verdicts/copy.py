"""copy-bound: >= 20% of the step in host-to-device copies (pageable memory blocks the loop), and
the fix that fits how they are made."""

from __future__ import annotations

from ...model import CopyTimes
from .. import thresholds as T
from .base import Context, Rule, Verdict, VerdictClass, at_least, margin, share


def rule(c: Context) -> Rule:
    cp = c.e.window.copies
    check = at_least("time in host-to-device copies", cp.share if cp else None, T.COPY_HIGH)
    return Rule(code="copy-bound", title="Copy-bound (host-to-device copies)", fired=bool(check.passed),
                checks=[check],
                why=f"the loop spends {share(cp.share)} of the step copying {cp.h2d_mb:,.1f} MB to the GPU" if cp
                else "no host-to-device copies seen")


def verdict(c: Context, rules: list[Rule]) -> Verdict:
    cp = c.e.window.copies
    assert cp is not None  # (the rule fired on their share)
    pcie_rx = c.e.gpu.pcie_rx
    pcie = f" · PCIe to the GPU {pcie_rx / 2**30:.1f} GiB/s" if pcie_rx is not None else ""
    evidence = (f"copies {share(cp.share)} of the step ({cp.ms:.1f} ms): {cp.h2d_mb:,.1f} MB to the GPU per step in "
                f"{cp.calls:,.0f} copies, {share(cp.pageable)} from pageable memory, {share(cp.blocking)} blocking"
                f"{pcie} · {c.gpu_words()}")
    return Verdict(code="copy-bound", headline="copy-bound: host-to-device copies", evidence=evidence,
                   next_step=_next_step(cp), confidence=margin(cp.share, T.COPY_HIGH), rules=rules)


def _next_step(cp: CopyTimes) -> str:
    if cp.pageable >= 0.5:
        step = ("the batch is copied from pageable memory, which blocks the loop for the whole transfer: "
                "DataLoader(pin_memory=True) (or tensor.pin_memory()) and .to(device, non_blocking=True), so the copy "
                "overlaps the GPU's work")
    elif cp.blocking >= 0.5:
        step = ("pinned, but copied without non_blocking=True: .to(device, non_blocking=True) lets the copy overlap the "
                "GPU's work")
    else:
        step = (f"{cp.h2d_mb:,.0f} MB a step, pinned and asynchronous, still hold the loop: copy less (uint8 images "
                "converted on the GPU, smaller dtypes), or move the preprocessing to the GPU")
    if cp.d2h_mb >= cp.h2d_mb and cp.d2h_mb:
        step += f"; {cp.d2h_mb:,.1f} MB come back to the host each step: keep them on the GPU"
    return step


CLASS = VerdictClass(rule=rule, verdict=verdict)
