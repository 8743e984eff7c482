"""The words of the two verdicts about the present moment: a job that ended (why, and what to do),
and a loop that stalled (where it waits, what it waits for, and what to look at). Pure: the
diagnosis's evidence in, (headline, evidence, next step) out."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import JobEnd, Memory
from .memory import gib, oom_numbers, peak_share

if TYPE_CHECKING:  # (diagnosis imports this module for its words)
    from .diagnosis import Evidence


def last_gauges(m: Memory) -> str:
    """The allocator's last gauges before the end (read at exit where the probe ran its exit hook)."""
    share = peak_share(m)
    cap = f" of {'the cap of ' if m.limit else ''}{gib(m.capacity)} ({share:.0%})" if share is not None else ""
    counts = [f"{n} {what}" for n, what in ((m.alloc_retries, "allocator retries"), (m.ooms, "out-of-memory errors"))
              if n]
    return (f"GPU memory last read: allocated {gib(m.allocated)}, reserved {gib(m.reserved)}, peak "
            f"{gib(m.peak_allocated)}{cap}" + (f"; {', '.join(counts)} in all" if counts else ""))


def oom_step(text: str, m: Memory | None) -> str:
    """The fix for an out-of-memory death that its own numbers point to: when the allocator held
    at least the request reserved but unallocated, the memory was there in blocks of the wrong sizes
    (fragmentation: PyTorch's own message points to expandable segments); else it was full."""
    n = oom_numbers(text)
    asked, spare = n.get("asked"), n.get("unallocated")
    real = "a smaller batch, activation checkpointing (torch.utils.checkpoint), or a smaller dtype (bf16 autocast)"
    if asked is not None and spare is not None and spare >= asked and not (m is not None and m.expandable):
        return (f"the GPU ran out of memory asking for {gib(asked)} while {gib(spare)} was reserved but unallocated: "
                "fragmentation: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; if it still runs out, " + real)
    if asked is not None:
        free = f" ({gib(n['free'])} free on the device)" if "free" in n else ""
        return f"the GPU ran out of memory asking for {gib(asked)}{free}: the live tensors fill it: {real}"
    return (f"the GPU ran out of memory: {real}; when reserved is far above allocated (fragmentation), "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")


CUT_OFF = ("ConnectionResetError", "EOFError", "BrokenPipeError", "ConnectionRefusedError")


def batch_cut_off(exception: str, frames: list[str]) -> bool:
    """The loop's DataLoader raised a socket's error: a worker died while it handed over a batch (its
    tensors' shared memory goes over a socket; torch's watchdog would have said "DataLoader worker
    ... exited unexpectedly", had it seen the death first)."""
    return exception.split(":", 1)[0] in CUT_OFF and any("torch/utils/data/" in f for f in frames)


def exited_words(end: JobEnd, memory: Memory | None, ran_as: str | None = None) -> tuple[str, str, str]:
    """ran_as: the verdict of its last window while it ran, kept with its last numbers."""
    ex = end.exception or ""
    code = f" (code {end.exit_code})" if end.exit_code is not None and end.exit_code > 0 else ""
    headline = {"signal": f"exited: {end.headline.split(': ', 1)[0]}", "clean": "exited: finished"}.get(
        end.how, f"exited{code}: {ex.split(':', 1)[0]}" if ex else f"exited{code}")
    evidence = end.headline + (f" · at {end.frames[0].removeprefix('at ')}" if end.frames else "")
    if ran_as:
        evidence += f" · while it ran: {ran_as}"
    if memory is not None and memory.allocated is not None:
        evidence += " · " + last_gauges(memory)
    if "OutOfMemoryError" in ex or "out of memory" in ex.lower():
        step = oom_step(ex, memory)
    elif "NCCL" in ex or "ProcessGroup" in ex or "DistBackendError" in ex:
        step = "a collective failed: the rank that failed first is the cause (its own end, in its output)"
    elif "DataLoader worker" in ex or batch_cut_off(ex, end.frames):
        step = ("a DataLoader worker died: killed by the host's OOM killer (dmesg -T | grep -i oom) or a crash in "
                "the dataset's code (its traceback is in the output above it)")
    elif end.how == "signal" and end.exit_code in (-9,):
        step = ("SIGKILL leaves no trace in the job: the kernel's OOM killer (dmesg -T | grep -i oom, "
                "journalctl -k), or a scheduler (a time limit, a preemption)")
    elif end.how == "signal":
        step = "stopped from outside (a scheduler's SIGTERM, Ctrl-C, kill)"
    elif end.how == "clean":
        step = "nothing to fix: the job ran to its end"
    elif ex:
        step = "the exception above ended it" + (f": its output is in {end.log}" if end.log else "")
    elif end.how == "unknown":
        step = "run it under `tuimon run` to keep its exit code and output"
    else:
        step = f"its output: {end.log}" if end.log else "its exit code says what the job meant by it"
    return headline, evidence, step


def stalled_words(e: Evidence, gpu_words: str) -> tuple[str, str, str]:
    """e: the diagnosis's Evidence (a stalled loop, or stalled ranks)."""
    s, now = e.stall, e.now
    phase = (s.phase if s else None) or (now.phase if now else None) or "?"
    if s is not None and s.first_step:
        quiet = f"no step yet, {phase} for {s.quiet_s:,.0f} s"
    elif s is not None:
        quiet = f"no step for {s.quiet_s:,.0f} s (bar {s.limit_s:,.0f} s)" + \
                (f", {phase} for {s.phase_s:,.0f} s" if s.phase_s is not None else "")
    else:
        quiet = "ranks stalled"
    where = f" at {now.where}" if now and now.where else ""
    waiting = f" (in {now.waiting_in})" if now and now.waiting_in else ""
    evidence = f"{quiet}{where}{waiting}"
    if e.loop_cpu is not None:
        evidence += f" · loop thread {e.loop_cpu:.0f}% CPU"
    if e.process_state == "stopped":
        return ("stalled: the process is stopped", evidence + " · process state: stopped",
                "it was stopped (SIGSTOP, Ctrl-Z, a debugger): kill -CONT <PID> resumes it")
    if e.stalled_ranks and e.ranks >= 2:
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
    idle = e.loop_cpu is not None and e.loop_cpu < 10
    if idle:
        step = (f"the loop thread is blocked{where} ({now.waiting_in if now and now.waiting_in else 'a call'}): "
                "a lock, a sleep, a read that never returns; t shows every thread's stack")
    else:
        step = (f"the loop thread is busy{where} and has made no step: a long computation (a checkpoint, an "
                "evaluation) or a loop that never ends; t shows every thread's stack")
    return f"stalled: in {phase}", evidence, step


def _power(e: Evidence) -> str:
    return f", power {e.power_share:.0%} of its limit" if e.power_share is not None else ""


def _workers_words(e: Evidence) -> str:
    if e.workers == 0:
        return " · num_workers=0 (the loop makes its own batches)"
    if e.workers is None:
        return ""
    states = ", ".join(f"{pid} {state} {cpu:.0f}%" if cpu is not None else f"{pid} {state}"
                       for pid, state, cpu in e.worker_states[:6])
    alive = e.workers_alive if e.workers_alive is not None else len(e.worker_states)
    return f" · workers {alive} of {e.workers} alive" + (f": {states}" if states else "")


def _data_step(e: Evidence) -> str:
    alive = e.workers_alive if e.workers_alive is not None else len(e.worker_states)
    if e.workers and alive < e.workers:
        return (f"{e.workers - alive} of {e.workers} DataLoader workers died: the loader waits for a batch that will "
                "not come (the host's OOM killer? dmesg -T | grep -i oom)")
    io = [w for w in e.worker_states if w[1] == "disk-sleep"]
    if io:
        return (f"{len(io)} DataLoader worker(s) blocked in I/O (disk sleep): a read that does not return (storage, "
                "a network filesystem); py-spy dump --pid <worker> shows where")
    if e.workers and e.worker_states and all((w[2] or 0) < 10 for w in e.worker_states):
        return ("the DataLoader's workers are alive and idle: each waits on something that never comes (a lock, a "
                "socket, a read); py-spy dump --pid <worker> shows where")
    if e.workers == 0:
        return "the loop's own data code is stuck (num_workers=0): the stacks below say where"
    return "the loader waits for its workers: py-spy dump --pid <worker> shows where each one is"


def _ranks_words(e: Evidence, evidence: str, gpu_words: str) -> tuple[str, str, str]:
    stalled = e.stalled_ranks
    listed = "; ".join(f"rank {r}: {ph or '?'}" + (f" {t:,.0f} s" if t is not None else "")
                       + (f" at {w}" if w else "") for r, ph, t, w in stalled[:4])
    if e.holding_ranks:
        held = ", ".join(str(r) for r in e.holding_ranks)
        waiting = [r for r, _ in e.waiting_ranks]
        calls = sorted({c for _, c in e.waiting_ranks if c})
        phase_of = {r: (ph, t) for r, ph, t, _ in stalled}
        first = e.holding_ranks[0]
        ph, t = phase_of.get(first, (None, None))
        inside = f"it is in {ph}" + (f" for {t:,.0f} s" if t is not None else "") if ph else "it is gone"
        call = f" ({', '.join(calls)})" if calls else ""
        return (f"stalled: rank{'s' if len(e.holding_ranks) > 1 else ''} {held} hold"
                f"{'' if len(e.holding_ranks) > 1 else 's'} the others",
                f"{listed} · {gpu_words}",
                f"rank {first} never entered the collective rank{'s' if len(waiting) > 1 else ''} "
                f"{', '.join(map(str, waiting))} wait{'' if len(waiting) > 1 else 's'} in{call}: {inside}")
    return ("stalled: every rank waits", f"{listed} · {gpu_words}",
            "every rank here waits in a collective: the rank they wait for is on another node, or the collective "
            "itself hangs (NCCL: TORCH_NCCL_TRACE_BUFFER_SIZE and the flight recorder name the missing rank)")
