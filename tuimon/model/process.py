"""The target process and its descendants (DataLoader workers, torchrun ranks), from psutil."""

from __future__ import annotations

from dataclasses import field

from .record import record
from .values import NA

Num = float | int | NA


@record
class ProcRow:
    pid: int
    role: str  # 'target' | 'child'
    name: str | NA = NA("not read")
    cpu_percent: Num = NA("not read")  # % of one core since the previous sample
    rss: Num = NA("not read")  # bytes
    threads: Num = NA("not read")
    state: str | NA = NA("not read")
    io_read: Num = NA("not read")  # bytes, since the process started
    io_write: Num = NA("not read")
    pss: int | None = None  # bytes, shared pages split among their sharers (forked workers share most)
    loop: bool = False  # the process whose channel is shown (the training process)
    rank: int | None = None  # a rank of the job (its channel says which), else None


@record
class HostSample:
    cpu_percent: float  # all cores, 0..100
    cpus: int
    mem_used: int  # bytes
    mem_total: int


@record
class ProcessSample:
    pid: int
    t: int = 0
    alive: bool = True
    exited_at: float | None = None  # wall-clock time it was first seen gone
    exit_code: int | None = None  # known when tuimon launched it; negative: killed by that signal
    procs: list[ProcRow] = field(default_factory=list)
    cpu_percent: float | None = None  # the whole tree
    rss: int | None = None  # the whole tree (RSS overlaps between forked processes)
    loop_cpu: float | None = None  # % of one core used by the loop's thread (the thread that steps)
    loop_cpu_wait: float | None = None  # % of the time the loop's thread was runnable, waiting for a core
