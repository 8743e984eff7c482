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
    thread's samples in the data phase mostly running (not blocked, LOOP_BLOCKED_SAMPLES): it was
    not waiting for a batch to be made (a wait that long is a blocked sample) but taking ready ones
    in: each tensor of a worker's batch is unpickled and its shared memory fetched from the worker
    (a round trip, under a millisecond: too short for a blocked sample) on the loop's thread. The
    cost grows with the tensors a batch holds (with the queue full, 1.1 ms of next() for a batch of
    one tensor, 15-24 ms for one of 64: torch 2.13 on a 2-core machine), and more workers do not
    shorten it. Blocked: it waited for the workers, busy or not."""
    w = e.workers
    if w.count == 0:
        return "num_workers=0: the loop makes its own batches: DataLoader(num_workers=N) loads them in parallel"
    blocked = blocked_share(e.host.hot, "data")
    if w.count and blocked is not None and blocked < T.LOOP_BLOCKED_SAMPLES.value:
        return (f"num_workers={w.count}, and the loop thread's samples in its data wait are {share(1 - blocked)} "
                "running, not waiting for a batch: the batches were ready and the loop spends the time taking "
                "them in (each tensor a worker sends is unpickled and fetched from the worker on the loop's "
                "thread): fewer, larger tensors per batch (stack the fields a batch sends apart); more workers "
                "will not help")
    if w.count and w.cpu:
        mean = sum(w.cpu) / len(w.cpu)
        if mean >= T.WORKERS_BUSY.value:
            return (f"num_workers={w.count} and the workers at {mean:.0f}% CPU: more workers (cores allowing) "
                    "or cheaper transforms")
        return (f"num_workers={w.count}, the workers at {mean:.0f}% CPU (not busy): they wait on I/O: faster "
                "storage, cached or pre-decoded data, a larger prefetch_factor")
    return "the loop waits for batches: more DataLoader workers, or cheaper transforms"


HIGH = VerdictClass(rule=lambda c: _rule(c, high=True), verdict=lambda c, rules: _verdict(c, rules, high=True))
MODERATE = VerdictClass(rule=lambda c: _rule(c, high=False), verdict=lambda c, rules: _verdict(c, rules, high=False))
