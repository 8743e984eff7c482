"""host-bound: the GPU is mostly idle (SM < 50%) and the loop neither waits for data nor for the
GPU (or those waits are outranked): launches / Python in the model, Python outside it, or a loop
thread blocked somewhere tuimon does not see."""

from __future__ import annotations

from ...model import HotLine
from ...model.vocab import Confidence
from .. import thresholds as T
from ..anatomy import how_of
from .base import (
    MODEL,
    Check,
    Context,
    Rule,
    Verdict,
    VerdictClass,
    below,
    blocked_share,
    loop_cpu,
    margin,
    model_share,
    optimizer_step,
    outranked,
    percent,
    share,
)
from .evidence import Evidence


def rule(c: Context) -> Rule:
    e = c.e
    idle = below(c.busy_name, c.busy, T.GPU_IDLE, percent)
    data = _small_or_outranked(e, "data wait", "data", e.window.data_share, T.INPUT_MODERATE, T.INPUT_HIGH)
    sync = _small_or_outranked(e, "time blocked in syncs", "sync", e.sync.share, T.SYNC_MODERATE, T.SYNC_HIGH)
    fired = idle.passed is not False and bool(data.passed) and sync.passed is not False
    return Rule(code="host-bound", title="Host-bound (the GPU waits for Python)", fired=fired, checks=[idle, data, sync],
                why=f"{c.gpu_words()} while the loop neither waits for data nor for the GPU, or a part of the step "
                    f"{T.RANK_FACTOR.show()} larger outranks those waits" if fired
                else "the GPU is not idle enough, or the loop waits for data or syncs")


def _small_or_outranked(e: Evidence, what: str, phase: str, value: float | None, moderate: T.Threshold,
                        high: T.Threshold) -> Check:
    """A wait under its moderate bar, or a moderate one that a part of the step RANK_FACTOR times
    larger outranks (a high one never yields)."""
    small = below(what, value, moderate)
    if value is None or small.passed is not False:  # (None: not measured, and small says so)
        return small
    ranked = outranked(e, phase, value)
    return Check(what=what, value=small.value, test=f"{small.test}, or under {high.show()} and outranked ({ranked.value})",
                 passed=value < high.value and ranked.passed is False, source=f"{moderate.source}; {T.RANK_FACTOR.source}")


def verdict(c: Context, rules: list[Rule]) -> Verdict:
    """Which host work the GPU waits for, from the phases: the model's own calls (launches and the
    Python around them), or time outside every phase (_outside_model).
    (The loop thread's CPU cannot judge the model phases: on CUDA, backward runs in autograd's own
    thread while the loop waits.)"""
    e, w = c.e, c.e.window
    model = model_share(e)
    other = w.phases.get("other", 0.0)
    confidence: Confidence = "low" if c.busy is None else margin(c.busy, T.GPU_IDLE, above=False)
    if other > model:
        return _outside_model(c, rules, model, other, confidence)
    _, cpu = loop_cpu(e)
    gpu = c.gpu_words()
    opt, largest = w.phases.get("optimizer", 0.0), max(w.phases.get(p, 0.0) for p in MODEL)
    if opt and opt == largest:  # the optimizer's step is the model's largest part
        return Verdict(code="host-bound", headline="host-bound: the optimizer step",
                       evidence=f"{gpu} · optimizer {share(opt)} of the step (forward+backward+optimizer {share(model)})"
                                f" · {cpu}" + (f" · {w.optimizer}" if w.optimizer else ""),
                       next_step=optimizer_step(e, opt), confidence=confidence, rules=rules)
    if c.busy is None:  # no GPU in sight (neither NVML nor the job's CUDA events): the model's work is on the CPU
        return Verdict(code="host-bound", headline="host-bound: the model's work on the CPU",
                       evidence=f"{gpu} · forward+backward+optimizer {share(model)} of the step on the CPU · {cpu}",
                       next_step="no GPU seen (neither NVML nor CUDA events): the model computes on the CPU: a GPU "
                                 "(model.to('cuda')) if there is one, else cheaper CPU work: torch.compile, larger "
                                 "batches (fewer, larger ops), torch.set_num_threads(the cores it has)",
                       confidence=confidence, rules=rules)
    ops_in = sum(w.ops.by_phase.get(p, 0) for p in MODEL) if w.ops else 0
    if w.ops is not None and ops_in:
        us = model * (w.step_ms or 0.0) * 1e3 / ops_in
        step = (f"{ops_in:,} ops per step in the model averaging ~{us:,.0f} us of host time each (step {w.ops.step} "
                "counted): CUDA graphs (torch.compile(mode='reduce-overhead')) or torch.compile to fuse them, or larger "
                "batches")
    elif w.kernels_per_step:
        step = (f"{w.kernels_per_step:,.0f} kernels per step averaging {w.kernel_us:.1f} us (last capture): CUDA graphs "
                "(torch.compile(mode='reduce-overhead')) or torch.compile to fuse them, or larger batches")
    else:
        step = ("the host launches work slower than the GPU runs it: torch.compile (fuses kernels), CUDA graphs, or "
                "larger batches; c counts the kernels per step")
    return Verdict(code="host-bound", headline="host-bound: launches and Python in the model",
                   evidence=f"{gpu} · forward+backward+optimizer {share(model)} of the step on the host · {cpu}",
                   next_step=step, confidence=confidence, rules=rules)


def _outside_model(c: Context, rules: list[Rule], model: float, other: float, confidence: Confidence) -> Verdict:
    """Host-bound with more of the step outside every phase than in the model: ops launched outside
    any module, or the loop thread's CPU tells Python work from a thread blocked on something tuimon
    does not see. Time the thread waited for a core counts with its CPU: on a busy machine it would
    have run then (the same bar for the sum). Until that CPU is read (None), the verdict names the
    time outside the model, not its kind."""
    e, h = c.e, c.e.host
    _, cpu = loop_cpu(e)
    gpu = c.gpu_words()
    if h.loop_cpu is None:  # Python or a blocked thread: only its CPU can tell
        return Verdict(code="host-bound", headline="host-bound: outside the model",
                       evidence=f"{gpu} · other {share(other)} of the step (forward+backward+optimizer {share(model)})"
                                f" · {cpu}",
                       next_step=f"{share(other)} of the step is outside the model, data and syncs; the loop thread's "
                                 "CPU, once read, tells Python work from a thread blocked on something tuimon does not "
                                 "see", confidence="low", rules=rules)
    line = next((x for x in h.hot if x.phase == "other"), None)
    at = f" · {line.where} {share(line.share)} of the time ({how_of(line)[0]})" if line else ""
    launches = _launches_outside(c, rules, other, at, confidence)
    if launches is not None:
        return launches
    wait = h.loop_cpu_wait if h.loop_cpu_wait is not None and h.loop_cpu_wait >= 0.5 else 0.0
    blocked = blocked_share(h.hot, "other")  # (None: no samples there: the CPU alone says it)
    computing = blocked is not None and blocked < T.LOOP_BLOCKED_SAMPLES.value
    if h.loop_cpu + wait < T.LOOP_CPU_BUSY.value and not computing:
        where = (f"it is blocked at {line.where} ({share(line.waiting)} of that line's samples blocked in a call: a "
                 "sleep, a lock, I/O, a wait)" if line and line.waiting >= 0.5 else
                 "it is blocked on something tuimon does not see (I/O, locks, sleeps, collectives): h shows the "
                 "lines")
        return Verdict(code="host-bound", headline="host-bound: the loop waits elsewhere",
                       evidence=f"{gpu} · other {share(other)} of the step · {cpu} (< {T.LOOP_CPU_BUSY.show()}){at}",
                       next_step=f"outside the model, data and syncs the loop thread is mostly not computing: {where}",
                       confidence=confidence, rules=rules)
    step = (f"{share(other)} of the step is Python outside the model, data and syncs"
            + (f", {share(line.share)} of it at {line.where}" if line else "")
            + ": move it off the loop (logging, metrics, host-side preprocessing), or do it every N steps")
    if line and line.native >= 0.5:
        step = (f"{share(other)} of the step is outside the model, {share(line.share)} of the time at {line.where}, "
                f"in a native call ({share(line.native)} of its samples: a copy or an op on the CPU): move that work "
                "to the GPU or to the DataLoader's workers, or do it every N steps")
    if h.loop_cpu + wait < T.LOOP_CPU_BUSY.value:  # its own samples say it computes there
        step += (f"; the loop thread's samples there are {share(1 - (blocked or 0.0))} running though its CPU is "
                 f"{h.loop_cpu:.0f}%: the rest it waited for the GIL (other threads of the job hold it)")
    elif h.loop_cpu < T.LOOP_CPU_BUSY.value:  # the wait for a core made it busy
        step += (f"; and the loop thread waited for a core {wait:.0f}% of the time: other processes compete for "
                 "this machine's CPUs (DataLoader workers beyond the cores, other jobs): leave the loop a core")
    return Verdict(code="host-bound", headline="host-bound: Python outside the model",
                   evidence=f"{gpu} · other {share(other)} of the step (forward+backward+optimizer {share(model)}) · "
                            f"{cpu}{at}", next_step=step, confidence=confidence, rules=rules)


def _launches_outside(c: Context, rules: list[Rule], other: float, at: str, confidence: Confidence) -> Verdict | None:
    """Ops launched outside any module that explain the time outside the model (None: they do not)."""
    e, ops, step_ms = c.e, c.e.window.ops, c.e.window.step_ms or 0.0
    ops_out = ops.by_phase.get("other", 0) if ops else 0
    if ops is None or not ops_out or c.busy is None:
        return None
    at_ops = _time_at_op_lines(e, "other", other)
    if at_ops is None and _native_share(e.host.hot, "other") < 0.5 and not _ops_explain(ops_out, other * step_ms):
        return None
    us = at_ops[1] if at_ops is not None else other * step_ms * 1e3 / ops_out
    top = next(iter(ops.lines.items()), None)
    return Verdict(code="host-bound", headline="host-bound: launches outside the model",
                   evidence=f"{c.gpu_words()} · other {share(other)} of the step: {ops_out:,} ops per step outside any "
                            f"module, ~{us:,.0f} us each on the host"
                            + (f" ({share(at_ops[0])} of the step at the lines issuing them)" if at_ops else "")
                            + f" (step {ops.step} counted){at}",
                   next_step=f"tensor code outside the model issues {ops_out:,} small ops a step"
                             + (f", {top[1]:,} of them at {top[0]}" if top else "")
                             + ": fuse them (torch.compile that function), batch them into fewer, larger ops, or "
                               "capture them in a CUDA graph", confidence=confidence, rules=rules)


def _time_at_op_lines(e: Evidence, phase: str, phase_share: float) -> tuple[float, float] | None:
    """Measured launches: the sampled time at the phase's hot lines that issue ops (the op counter
    names the lines it counted at) whose own time comes to at most OP_HOST_MAX_US an op, when
    they are half or more of the phase: (their share of the step, the host us per op). None
    otherwise. (A launch holds the GIL for microseconds, so the sampler sees these lines as Python:
    their op count, not how the thread looked, says what the time is. A line slower than that per
    op does other work, and is left out rather than averaged in.)"""
    ops, step_ms = e.window.ops, e.window.step_ms
    if ops is None or not step_ms or phase_share <= 0:
        return None
    step_us = step_ms * 1e3
    lines = [h for h in e.host.hot if h.phase == phase and ops.lines.get(h.line)
             and h.share * step_us / ops.lines[h.line] <= T.OP_HOST_MAX_US.value]
    at = sum(h.share for h in lines)
    n = sum(ops.lines[h.line] for h in lines)
    if not n or at < 0.5 * phase_share:
        return None
    return at, at * step_us / n


def _ops_explain(ops: int, ms: float) -> bool:
    """At the least host time an op costs, do these ops take half or more of ms? (An op's launch
    holds the GIL for microseconds: a sampler that waits for the thread's next bytecode sees the
    line, not the native call; the count tells.)"""
    return ms > 0 and ops * T.OP_HOST_US.value / 1e3 >= 0.5 * ms


def _native_share(hot: list[HotLine], phase: str) -> float:
    """Of a phase's samples, the share the loop thread spent inside native calls (ops, copies)."""
    n = sum(h.samples for h in hot if h.phase == phase)
    return sum(h.samples * h.native for h in hot if h.phase == phase) / n if n else 0.0


CLASS = VerdictClass(rule=rule, verdict=verdict)
