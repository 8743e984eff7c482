"""exited: the process has ended: how and why, as far as tuimon can know, and what to do."""

from __future__ import annotations

from ...model import JobEnd, Memory
from ...model.units import human_bytes
from ..memory import oom_numbers, peak_share
from .base import Check, Context, Rule, Verdict, VerdictClass


def rule(c: Context) -> Rule:
    end = c.e.present.job_end
    check = Check(what="the process", value="exited" if end else "alive", test="exited", passed=end is not None)
    return Rule(code="exited", title="Exited", fired=end is not None, checks=[check],
                why=end.headline if end else "the process is alive")


def verdict(c: Context, rules: list[Rule]) -> Verdict:
    end = c.e.present.job_end
    assert end is not None  # (the rule fired: the process ended)
    headline, evidence, step = exited_words(end, c.e.gpu.memory, c.e.present.ran_as)
    return Verdict(code="exited", headline=headline, evidence=evidence, next_step=step,
                   confidence="high" if end.how != "unknown" else "medium", rules=rules)


def exited_words(end: JobEnd, memory: Memory | None, ran_as: str | None = None) -> tuple[str, str, str]:
    """(headline, evidence, next step). ran_as: the verdict of its last window while it ran, kept
    with its last numbers."""
    ex = end.exception or ""
    code = f" (code {end.exit_code})" if end.exit_code is not None and end.exit_code > 0 else ""
    headline = {"signal": f"exited: {end.headline.split(': ', 1)[0]}", "clean": "exited: finished"}.get(
        end.how, f"exited{code}: {ex.split(':', 1)[0]}" if ex else f"exited{code}")
    evidence = end.headline + (f" · at {end.frames[0].removeprefix('at ')}" if end.frames else "")
    if ran_as:
        evidence += f" · while it ran: {ran_as}"
    if memory is not None and memory.allocated is not None:
        evidence += " · " + last_gauges(memory)
    return headline, evidence, _next_step(end, ex, memory)


def _next_step(end: JobEnd, ex: str, memory: Memory | None) -> str:
    if "OutOfMemoryError" in ex or "out of memory" in ex.lower():
        return oom_step(ex, memory)
    if "NCCL" in ex or "ProcessGroup" in ex or "DistBackendError" in ex:
        return "a collective failed: the rank that failed first is the cause (its own end, in its output)"
    if "DataLoader worker" in ex or batch_cut_off(ex, end.frames):
        return ("a DataLoader worker died: killed by the host's OOM killer (dmesg -T | grep -i oom) or a crash in "
                "the dataset's code (its traceback is in the output above it)")
    if end.how == "signal" and end.exit_code in (-9,):
        return ("SIGKILL leaves no trace in the job: the kernel's OOM killer (dmesg -T | grep -i oom, "
                "journalctl -k), or a scheduler (a time limit, a preemption)")
    if end.how == "signal" and end.exit_code in CRASHES:
        return ("a crash in native code (an extension, the driver, torch): its output's last lines; "
                "`python -X faulthandler` prints the Python stack at the crash, a core dump (ulimit -c unlimited) "
                "the native one")
    if end.how == "signal":
        return "stopped from outside (a scheduler's SIGTERM, Ctrl-C, kill)"
    if end.how == "clean":
        return "nothing to fix: the job ran to its end"
    if ex:
        return "the exception above ended it" + (f": its output is in {end.log}" if end.log else "")
    if end.how == "unknown":
        return "run it under `tuimon run` to keep its exit code and output"
    return f"its output: {end.log}" if end.log else "its exit code says what the job meant by it"


def last_gauges(m: Memory) -> str:
    """The allocator's last gauges before the end (read at exit where the probe ran its exit hook)."""
    share = peak_share(m)
    cap = f" of {'the cap of ' if m.limit else ''}{human_bytes(m.capacity)} ({share:.0%})" if share is not None else ""
    counts = [f"{n} {what}" for n, what in ((m.alloc_retries, "allocator retries"), (m.ooms, "out-of-memory errors"))
              if n]
    return (f"GPU memory last read: allocated {human_bytes(m.allocated)}, reserved {human_bytes(m.reserved)}, peak "
            f"{human_bytes(m.peak_allocated)}{cap}" + (f"; {', '.join(counts)} in all" if counts else ""))


def oom_step(text: str, m: Memory | None) -> str:
    """The fix for an out-of-memory death that its own numbers point to: when the allocator held
    at least the request reserved but unallocated, the memory was there in blocks of the wrong sizes
    (fragmentation: PyTorch's own message points to expandable segments); else it was full."""
    n = oom_numbers(text)
    asked, spare = n.get("asked"), n.get("unallocated")
    real = "a smaller batch, activation checkpointing (torch.utils.checkpoint), or a smaller dtype (bf16 autocast)"
    if asked is not None and spare is not None and spare >= asked and not (m is not None and m.expandable):
        return (f"the GPU ran out of memory asking for {human_bytes(asked)} while {human_bytes(spare)} was reserved but unallocated: "
                "fragmentation: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; if it still runs out, " + real)
    if asked is not None:
        free = f" ({human_bytes(n['free'])} free on the device)" if "free" in n else ""
        return f"the GPU ran out of memory asking for {human_bytes(asked)}{free}: the live tensors fill it: {real}"
    return (f"the GPU ran out of memory: {real}; when reserved is far above allocated (fragmentation), "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")


CRASHES = (-4, -6, -7, -8, -11, -31)  # SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGSEGV, SIGSYS: the process's own fault
CUT_OFF = ("ConnectionResetError", "EOFError", "BrokenPipeError", "ConnectionRefusedError")


def batch_cut_off(exception: str, frames: list[str]) -> bool:
    """The loop's DataLoader raised a socket's error: a worker died while it handed over a batch (its
    tensors' shared memory goes over a socket; torch's watchdog would have said "DataLoader worker
    ... exited unexpectedly", had it seen the death first)."""
    return exception.split(":", 1)[0] in CUT_OFF and any("torch/utils/data/" in f for f in frames)


CLASS = VerdictClass(rule=rule, verdict=verdict)
