"""memory-pressure: the caching allocator frees its cache and retries cudaMalloc in >= 1 step in 20
(each retry drains the GPU), or the job caught out-of-memory errors and went on: it hides behind
every other class. Whether the memory is full or fragmented, and the fix that fits."""

from __future__ import annotations

from ...model.units import human_bytes
from .. import memory as mem
from .. import thresholds as T
from .base import Check, Context, Rule, Verdict, VerdictClass, at_least, margin, share


def rule(c: Context) -> Rule:
    m = c.e.gpu.memory
    rate = m.retries_per_step if m else None
    retries = at_least("allocator retries per step", rate, T.MEMORY_RETRIES, lambda v: "n/a" if v is None else f"{v:.2f}")
    ooms = m.ooms_in_window if m else None
    caught = Check(what="out-of-memory errors caught in the window", value="n/a" if ooms is None else str(ooms),
                   test=">= 1", passed=None if ooms is None else ooms >= 1)
    peak = mem.peak_share(m) if m else None
    full = Check(what="peak of live tensors, of what the allocator may use", value=share(peak),
                 test=f">= {T.MEMORY_FULL.show()}: full; below: fragmented",
                 passed=None if peak is None else peak >= T.MEMORY_FULL.value, source=T.MEMORY_FULL.source)
    if m is None:
        why = "no allocator gauges (a job on the CPU, or none read yet)"
    elif rate is None:
        why = "retries per step not measured yet (two reads of the gauges a step apart)"
    else:
        why = (f"{rate:.2f} retries per step over steps {m.retries_from}..{m.retries_to}"
               + (f", {ooms} out-of-memory errors caught" if ooms else ""))
    return Rule(code="memory-pressure", title="Memory pressure (the allocator frees its cache and retries)",
                fired=bool(retries.passed) or bool(caught.passed), checks=[retries, caught, full], why=why)


def verdict(c: Context, rules: list[Rule]) -> Verdict:
    """What the retries cost, whether the memory is full or fragmented, and the fix that fits."""
    m = c.e.gpu.memory
    assert m is not None  # (the rule fired on its retries)
    rate = m.retries_per_step or 0.0
    peak = mem.peak_share(m)
    cap = f"the cap of {human_bytes(m.limit)}" if m.limit else human_bytes(m.total)
    parts = [f"{rate:.2f} allocator retries per step" + (f" (steps {m.retries_from}..{m.retries_to})" if m.retries_to else "")]
    if m.ooms_in_window:
        parts.append(f"{m.ooms_in_window} out-of-memory errors caught")
    parts.append(f"peak {human_bytes(m.peak_allocated)} of {cap}" + (f" ({peak:.0%})" if peak is not None else ""))
    parts.append(f"reserved {human_bytes(m.reserved)}, allocated {human_bytes(m.allocated)}")
    if m.inactive_split:
        parts.append(f"{human_bytes(m.inactive_split)} in split blocks not in use")
    busy = c.e.gpu.busy_events
    if busy is not None:  # each retry waits for the GPU to drain, then cudaFree/cudaMalloc
        parts.append(f"GPU idle up to {1 - busy:.0%} of the step (CUDA events)")
    cost = ("each retry waits for the GPU to finish everything queued and returns the cache to CUDA (cudaFree), "
            "then cudaMalloc again, inside forward or backward")
    real = ("smaller batches, activation checkpointing (torch.utils.checkpoint) or a smaller dtype (bf16 autocast) "
            "for fewer live bytes")
    if m.expandable:
        step = f"live tensors need more than the allocator has, with expandable segments already on: {real}"
    elif peak is not None and peak < T.MEMORY_FULL.value:
        step = (f"the live tensors peak at {peak:.0%} of {cap}: the memory is there, cached in blocks of the wrong "
                "sizes (fragmentation): PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets the allocator grow and "
                f"reuse one segment; if they stay, {real}")
    else:
        step = (f"the live tensors fill {share(peak)} of {cap}: {real}; PYTORCH_CUDA_ALLOC_CONF="
                "expandable_segments:True also removes the retries that fragmentation adds")
    return Verdict(code="memory-pressure", headline="memory pressure: the allocator retries",
                   evidence=" · ".join(parts), next_step=f"{step} ({cost})",
                   confidence=margin(rate, T.MEMORY_RETRIES) if rate else "medium", rules=rules)


CLASS = VerdictClass(rule=rule, verdict=verdict)
