"""stalled: no step far beyond the loop's own history (analysis/stall.py), a stopped process, or
ranks stalled in a collective: where the loop waits, what it waits for, and what to look at."""

from __future__ import annotations

from ...model.vocab import Confidence
from .. import thresholds as T
from .base import Check, Context, Rule, Verdict, VerdictClass
from .evidence import Evidence


def rule(c: Context) -> Rule:
    e, s = c.e, c.e.present.stall
    what = "time in its open phase, no step yet" if s and s.first_step else "time since the last step"
    bar = f"{s.limit_s:,.1f} s: " if s is not None else ""
    before = (f", waiting (data, sync, comm) or the loop thread idle (< {T.STALL_IDLE_CPU.show()} CPU)"
              if s is not None and s.first_step else "")
    checks = [Check(what=what, value="n/a" if s is None else f"{s.quiet_s:,.1f} s",
                    test=f"> {bar}{T.STALL_FACTOR.show()} the longest step so far, at least {T.STALL_FLOOR.show()}"
                         + before,
                    passed=None if s is None else s.stalled,
                    source=f"{T.STALL_FACTOR.source}; floor: {T.STALL_FLOOR.source}"
                           + (f"; idle: {T.STALL_IDLE_CPU.source}" if before else ""))]
    if e.ranks.count >= 2:
        checks.append(Check(what="ranks stalled", value=str(len(e.ranks.stalled)), test=">= 1",
                            passed=bool(e.ranks.stalled)))
    stopped = e.host.process_state == "stopped"
    if stopped:
        checks.append(Check(what="process state", value="stopped", test="stopped", passed=True))
    fired = bool(s and s.stalled) or bool(e.ranks.stalled) or stopped
    if stopped:
        why = "the process is stopped (SIGSTOP): it makes no progress until it is continued"
    elif s is None:
        why = "the loop has not said what it is doing yet"
    elif s.first_step:
        why = f"no step yet; {s.phase or 'its phase'} for {s.quiet_s:,.1f} s" + \
              (", the loop thread idle" if s.idle else "")
    else:
        why = f"{s.quiet_s:,.1f} s since the last step; the bar is {s.limit_s:,.1f} s"
    return Rule(code="stalled", title="Stalled (no progress far beyond the loop's own steps)", fired=fired,
                checks=checks, why=why)


def verdict(c: Context, rules: list[Rule]) -> Verdict:
    headline, evidence, step = stalled_words(c.e, c.gpu_words())
    s = c.e.present.stall
    confidence: Confidence = "high" if s is not None and s.quiet_s >= 2 * s.limit_s else "medium"
    return Verdict(code="stalled", headline=headline, evidence=evidence, next_step=step, confidence=confidence,
                   rules=rules)


def stalled_words(e: Evidence, gpu_words: str) -> tuple[str, str, str]:
    """(headline, evidence, next step) of a stalled loop, or of stalled ranks."""
    s, now = e.present.stall, e.present.step
    phase = (s.phase if s else None) or (now.phase if now else None) or "?"
    if s is not None and s.first_step and s.idle:
        quiet = f"no step yet, blocked for {s.quiet_s:,.0f} s (bar {s.limit_s:,.0f} s)"
    elif s is not None and s.first_step:
        quiet = f"no step yet, {phase} for {s.quiet_s:,.0f} s"
    elif s is not None:
        quiet = f"no step for {s.quiet_s:,.0f} s (bar {s.limit_s:,.0f} s)" + \
                (f", {phase} for {s.phase_s:,.0f} s" if s.phase_s is not None else "")
    else:
        quiet = "ranks stalled"
    where = f" at {now.at}" if now and now.where else ""  # (a library's line: "... · from train.py:12")
    waiting = f" (in {now.waiting_in})" if now and now.waiting_in else ""
    evidence = f"{quiet}{where}{waiting}"
    if e.host.loop_cpu is not None:
        evidence += f" · loop thread {e.host.loop_cpu:.0f}% CPU"
    if e.host.process_state == "stopped":
        return ("stalled: the process is stopped", evidence + " · process state: stopped",
                "it was stopped (SIGSTOP, Ctrl-Z, a debugger): kill -CONT <PID> resumes it")
    if e.ranks.stalled and e.ranks.count >= 2:
        return _ranks_words(e, evidence, gpu_words)
    if phase == "data":
        return ("stalled: waiting for data", evidence + _workers_words(e), _data_step(e))
    if phase == "sync":
        return ("stalled: waiting for the GPU", f"{evidence} · {gpu_words}" + _power(e),
                "the host waits for a GPU kernel that does not finish: a kernel that spins or deadlocks, or a "
                "collective (NCCL) waiting for a peer that never comes; py-spy dump --native --pid <PID> shows "
                "the native side")
    if phase == "comm":
        return ("stalled: in a collective", f"{evidence} · {gpu_words}" + _power(e),
                "a collective waits for a rank that never reached it (a rank that died, diverged, or is on "
                "another node): look at every rank's open phase (tuimon attach <torchrun PID>)")
    if s is not None and s.first_step and s.idle and s.stalled:  # (blocked before its first step: where)
        return (f"stalled: blocked before its first step{where}", evidence,
                f"the loop thread waits{where}{waiting} and has made no step: a lock, input(), a sleep, a read or a "
                "queue that never returns; t shows every thread's stack")
    idle = e.host.loop_cpu is not None and e.host.loop_cpu < T.STALL_IDLE_CPU.value
    if idle:
        step = (f"the loop thread is blocked{where} ({now.waiting_in if now and now.waiting_in else 'a call'}): "
                "a lock, a sleep, a read that never returns; t shows every thread's stack")
    else:
        step = (f"the loop thread is busy{where} and has made no step: a long computation (a checkpoint, an "
                "evaluation) or a loop that never ends; t shows every thread's stack")
    return (f"stalled: in {phase}" if phase != "?" else "stalled: no step"), evidence, step


def _power(e: Evidence) -> str:
    return f", power {e.gpu.power_share:.0%} of its limit" if e.gpu.power_share is not None else ""


def _alive(e: Evidence) -> int:
    w = e.workers
    return w.alive if w.alive is not None else len(w.states)


def _workers_words(e: Evidence) -> str:
    w = e.workers
    if w.count == 0:
        return " · num_workers=0 (the loop makes its own batches)"
    if w.count is None:
        return ""
    states = ", ".join(f"{s.pid} {s.state} {s.cpu:.0f}%" if s.cpu is not None else f"{s.pid} {s.state}"
                       for s in w.states[:6])
    return f" · workers {_alive(e)} of {w.count} alive" + (f": {states}" if states else "")


def _data_step(e: Evidence) -> str:
    w, alive = e.workers, _alive(e)
    if w.count and alive < w.count:
        return (f"{w.count - alive} of {w.count} DataLoader workers died: the loader waits for a batch that will "
                "not come (the host's OOM killer? dmesg -T | grep -i oom)")
    io = [s for s in w.states if s.state == "disk-sleep"]
    if io:
        return (f"{len(io)} DataLoader worker(s) blocked in I/O (disk sleep): a read that does not return (storage, "
                "a network filesystem); py-spy dump --pid <worker> shows where")
    if w.count and w.states and all((s.cpu or 0) < 10 for s in w.states):
        return ("the DataLoader's workers are alive and idle: each waits on something that never comes (a lock, a "
                "socket, a read); py-spy dump --pid <worker> shows where")
    if w.count == 0:
        return "the loop's own data code is stuck (num_workers=0): the stacks below say where"
    return "the loader waits for its workers: py-spy dump --pid <worker> shows where each one is"


def _ranks_words(e: Evidence, evidence: str, gpu_words: str) -> tuple[str, str, str]:
    r = e.ranks
    listed = "; ".join(f"rank {s.rank}: {s.phase or '?'}" + (f" {s.phase_s:,.0f} s" if s.phase_s is not None else "")
                       + (f" at {s.where}" if s.where else "") for s in r.stalled[:4])
    if r.holding:
        held = ", ".join(str(h) for h in r.holding)
        waiting = [w.rank for w in r.waiting]
        calls = sorted({w.collective for w in r.waiting if w.collective})
        phase_of = {s.rank: (s.phase, s.phase_s) for s in r.stalled}
        first = r.holding[0]
        ph, t = phase_of.get(first, (None, None))
        inside = f"it is in {ph}" + (f" for {t:,.0f} s" if t is not None else "") if ph else "it is gone"
        call = f" ({', '.join(calls)})" if calls else ""
        many = len(r.holding) > 1
        return (f"stalled: rank{'s' if many else ''} {held} hold{'' if many else 's'} the others",
                f"{listed} · {gpu_words}",
                f"rank {first} never entered the collective rank{'s' if len(waiting) > 1 else ''} "
                f"{', '.join(map(str, waiting))} wait{'' if len(waiting) > 1 else 's'} in{call}: {inside}")
    return ("stalled: every rank waits", f"{listed} · {gpu_words}",
            "every rank here waits in a collective: the rank they wait for is on another node, or the collective "
            "itself hangs (NCCL: TORCH_NCCL_TRACE_BUFFER_SIZE and the flight recorder name the missing rank)")


CLASS = VerdictClass(rule=rule, verdict=verdict)
