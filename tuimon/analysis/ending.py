"""Why a job ended, from what tuimon has: the probe's last word (an uncaught exception, or a clean
end of the interpreter), the exit code where tuimon started the job, and the end of its output.
Pure: no I/O."""

from __future__ import annotations

import re
import signal

from ..model import JobEnd

# A Python traceback's last line ("torch.OutOfMemoryError: CUDA out of memory. ..."), a line at no
# indent: a dotted name ending in Error/Exception/Exit/Interrupt/Warning, then its message.
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Fault))(?::\s?(.*))?$")
_NCCL = re.compile(r"NCCL (?:error|WARN)|ncclUnhandledCudaError|ncclSystemError|ncclInternalError", re.I)


def exception_in(lines: list[str]) -> str | None:
    """The last exception a traceback in the job's output names ("Type: message"), else the last
    NCCL error line; None when neither is there."""
    for line in reversed(lines):
        m = _EXCEPTION.match(line.rstrip())
        if m and m.group(1) not in ("Warning", "UserWarning", "FutureWarning", "DeprecationWarning"):
            return line.strip()
    for line in reversed(lines):
        if _NCCL.search(line):
            return line.strip()
    return None


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def job_end(*, exit_code: int | None, probe_end: str | None, probe_text: str, log: str | None,
            log_tail: list[str]) -> JobEnd:
    """exit_code: the job's (tuimon started it), negative for a signal, None when unknown;
    probe_end: 'exception' | 'clean' | None (the probe never got to say: killed, or no probe)."""
    frames: list[str] = []
    exception = None
    if probe_end == "exception" and probe_text:
        first, *rest = probe_text.splitlines()
        exception, frames = first.strip(), [f.strip() for f in rest if f.strip()]
    found = exception_in(log_tail) if exception is None else None
    exception = exception or found
    if exit_code is not None and exit_code < 0:
        how, headline = "signal", f"killed by {_signal_name(-exit_code)}"
    elif exit_code is not None:
        how, headline = ("exit code" if exit_code else "clean"), f"exited with code {exit_code}"
    elif probe_end == "exception":
        how, headline = "exception", "ended by an uncaught exception"
    elif probe_end == "clean":
        how, headline = "clean", "its interpreter finished (exit code: known to its parent, not to tuimon)"
    else:
        how, headline = "unknown", ("ended without a clean exit: killed by a signal (SIGKILL, the kernel's OOM "
                                    "killer) or os._exit(); tuimon did not start it, so its exit code is unknown")
    if exception is not None:
        how = "exception" if how in ("clean", "unknown", "exit code") else how
        headline = f"{headline}: {exception}"
    return JobEnd(how=how, headline=headline, exit_code=exit_code, exception=exception, frames=frames[:4],
                  log=log, log_tail=list(log_tail[-12:]))
