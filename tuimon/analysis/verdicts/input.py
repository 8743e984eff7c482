"""input-bound: the loop waits for its batches. High (>= 20% of the step) comes before every class
but the present moment's, straggler and memory pressure: it hides the rest. Moderate (>= 5%)
yields to a part of the step RANK_FACTOR times larger, and comes after the GPU's and the CPU's
classes."""

from __future__ import annotations

from .. import thresholds as T
from .base import Context, Rule, Verdict, VerdictClass, at_least, blocked_share, margin, outranked, share
from .evidence import Evidence


def _rule(c: Context, high: bool) -> Rule:
    data = c.e.window.data_share
    t = T.INPUT_HIGH if high else T.INPUT_MODERATE
    check = at_least("data wait", data, t)
    checks = [check] if high else [check, outranked(c.e, "data", data)]
    fired = bool(check.passed) and checks[-1].passed is not False
    if fired:
        why = f"the loop waits {share(data)} of the step for batches"
    elif data is None:
        why = "data wait not measured"
    elif check.passed:
        why = f"data wait {share(data)} is moderate, and {checks[-1].what.split(' over ')[0]} is {checks[-1].value}"
    else:
        why = f"data wait {share(data)} is under {t.show()}"
    return Rule(code="input-high" if high else "input-moderate",
                title=f"Input-bound ({'high' if high else 'moderate'})", fired=fired, checks=checks, why=why)


def _verdict(c: Context, rules: list[Rule], high: bool) -> Verdict:
    data = c.e.window.data_share
    t = T.INPUT_HIGH if high else T.INPUT_MODERATE
    return Verdict(code="input-bound", headline="input-bound" if high else "input-bound (moderate)",
                   evidence=f"data wait {share(data)} of step time (>= {t.show()} is {'high' if high else 'moderate'})"
                            f" · {c.gpu_words()}",
                   next_step=_next_step(c.e), confidence=margin(data, t), rules=rules)


def _next_step(e: Evidence) -> str:
    """What to change, from who holds the time. num_workers=0: the loop makes its batches. The loop
    thread's samples in the data phase mostly running (not blocked, LOOP_BLOCKED_SAMPLES, over at
    least HOT_MIN_SAMPLES of them): it was not waiting for a batch to be made (a wait that long is a
    blocked sample) but taking ready ones in: a worker's batch is unpickled on the loop's thread, and
    each tensor's shared memory fetched from the worker (a round trip, under a millisecond on a quiet
    machine: too short for a blocked sample). Measured with the queue full (torch 2.13, 2 cores): 1.1
    ms of next() for a batch of one tensor, 15-24 ms for one of 64; beside two CPU burners 1.6 and 51
    ms, and 1.2 and 12 ms under the file_system sharing strategy (no round trip: named shared memory,
    which a killed job can leave behind, as PyTorch's docs warn). More workers shorten only the
    blocked part; when that part alone is a moderate input wait (INPUT_MODERATE of the step), the
    workers' advice comes with it (CI's loaded 2-core machine read a loop that waits for two idle
    workers' 60 ms batches 54% running in next(), here 76-95% blocked; why was not measured there: a
    longer intake, or Python in next() slowed by the load; half the wait was still for the workers).
    Blocked: it waited for the workers, busy or not. (With pin_memory=True the
    pin-memory thread takes the batches in (torch/utils/data/_utils/pin_memory.py) while the loop
    waits on its queue: blocked samples, the workers' advice; not checked on a GPU.)"""
    w = e.workers
    if w.count == 0:
        return "num_workers=0: the loop makes its own batches: DataLoader(num_workers=N) loads them in parallel"
    data_samples = sum(h.samples for h in e.host.hot if h.phase == "data")
    blocked = blocked_share(e.host.hot, "data") if data_samples >= T.HOT_MIN_SAMPLES.value else None
    if not w.count or blocked is None or blocked >= T.LOOP_BLOCKED_SAMPLES.value:
        advice = _for_the_workers(e) or "the loop waits for batches: more DataLoader workers, or cheaper transforms"
        return f"num_workers={w.count}, {advice}" if w.count else advice
    workers = f"more workers shorten at most the {share(blocked)} blocked" if blocked >= 0.005 else \
        "more workers will not help"
    part = blocked * (e.window.data_share or 0.0)  # (a share of samples times a timed share: about)
    if part >= T.INPUT_MODERATE.value:  # (the blocked part alone a moderate input wait)
        workers += f", ~{share(part)} of the step" + (f": {why}" if (why := _for_the_workers(e, more=False)) else "")
    return (f"num_workers={w.count}, and the loop thread's samples in its data wait are {share(1 - blocked)} "
            "running, not waiting for a batch: the loop's own work in next() holds that time (a worker's batch "
            "is unpickled on the loop's thread, each tensor's shared memory fetched from the worker): fewer, "
            "larger tensors per batch, larger batches, or torch.multiprocessing.set_sharing_strategy('file_system') "
            f"(no round trip per tensor; named shared memory that a killed job can leave behind); {workers}")


def _for_the_workers(e: Evidence, more: bool = True) -> str | None:
    """What shortens a wait for the workers, from how busy they are (None: their CPU not read yet).
    more=False: after words that said more workers already."""
    if not e.workers.cpu:
        return None
    mean = sum(e.workers.cpu) / len(e.workers.cpu)
    if mean >= T.WORKERS_BUSY.value:
        return f"the workers at {mean:.0f}% CPU: " + ("more workers (cores allowing) or cheaper transforms" if more
                                                      else "cheaper transforms, or cores for more of them")
    return (f"the workers at {mean:.0f}% CPU (not busy): they wait on I/O: faster storage, cached or pre-decoded "
            "data, a larger prefetch_factor")


HIGH = VerdictClass(rule=lambda c: _rule(c, high=True), verdict=lambda c, rules: _verdict(c, rules, high=True))
MODERATE = VerdictClass(rule=lambda c: _rule(c, high=False), verdict=lambda c, rules: _verdict(c, rules, high=False))
