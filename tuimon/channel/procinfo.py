"""What /proc says about a process: start time (to detect PID reuse), parent, liveness, a thread's
state, read by hand.

Stdlib only, and not psutil: the channel is the bottom layer (docs/DESIGN.md), used by the probe inside
the training process (which imports nothing the job does not have: psutil is not the job's) and by
the segment reader and discovery. The monitor's samplers read processes with psutil
(sources/process.py) and come here only for what psutil has no call for: a tree's listing from the
per-thread children files (descendants: psutil's children() reads every process's stat instead),
the last PID handed out (last_pid), one thread's CPU time and run delay (thread_cpu_ticks,
thread_run_delay_ns: psutil reads threads only all at once, and no run delay at all).
"""

from __future__ import annotations

import os
import signal

_CHUNK = 4096
_WHOLE = _CHUNK - 256  # a read shorter than this left room for another of the file's lines: it had them all


def read_file(path: str, head: bool = False) -> bytes:
    """A whole small /proc file (head: its first 4 KiB only). os.open/os.read, not open(): the
    monitor reads a few dozen of these a second, and a Python file object (FileIO + BufferedReader)
    costs more than the read itself. Raises OSError as open() would."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, _CHUNK)
        if head or len(data) < _WHOLE:  # (the kernel's seq_file fills a read until the next line does not fit)
            return data
        parts = [data]
        while data:
            data = os.read(fd, _CHUNK)
            parts.append(data)
        return b"".join(parts)
    finally:
        os.close(fd)


def read_stat(pid: int, tid: int | None = None) -> tuple[bytes, list[bytes]]:
    """/proc/PID/stat (proc(5)), or one thread's /proc/PID/task/TID/stat, as (the command name, the
    fields after it: [0] is field 3, the state); the name may hold spaces and parens. Raises OSError
    where the process (thread) is gone or its file is not readable or cut short."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    data = read_file(path)
    end = data.rfind(b")")
    if end < 0:
        raise FileNotFoundError(f"{path}: cut short")
    return data[data.find(b"(") + 1 : end], data[end + 2 :].split()


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name, or None."""
    try:
        return [x.decode("ascii", "replace") for x in read_stat(pid)[1]]
    except OSError:
        return None


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None if there is no such process."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20:
        return None
    # Field 22 of stat; fields[0] here is field 3 (state).
    return int(fields[19])


def parent(pid: int) -> int | None:
    """The parent's PID (field 4 of stat), or None if there is no such process."""
    fields = _stat_fields(pid)
    return int(fields[1]) if fields is not None and len(fields) > 1 else None


def thread_cpu_ticks(pid: int, tid: int) -> int | None:
    """User + system CPU time of one thread of pid, in clock ticks (os.sysconf('SC_CLK_TCK'))."""
    try:
        data = read_file(f"/proc/{pid}/task/{tid}/stat")
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return int(fields[11]) + int(fields[12]) if len(fields) > 12 else None  # fields 14 and 15 of stat


def thread_run_delay_ns(pid: int, tid: int) -> int | None:
    """Time one thread of pid has spent runnable but waiting for a CPU, in ns: the second field of
    /proc/PID/task/TID/schedstat (the kernel's sched-stats docs); None where the kernel lacks it."""
    try:
        fields = read_file(f"/proc/{pid}/task/{tid}/schedstat").split()
    except OSError:
        return None
    return int(fields[1]) if len(fields) > 1 else None


def thread_state(pid: int, tid: int | None) -> str | None:
    """One thread's state letter (R running, S sleeping, D waiting in I/O, T stopped, ...); tid None: the
    process's (read_stat's /proc/PID/stat: its main thread's)."""
    try:
        fields = read_stat(pid, tid)[1]
    except OSError:
        return None
    return fields[0].decode("ascii", "replace") if fields else None


def namespace_pid(pid: int) -> int | None:
    """The PID the process has in its own PID namespace (a container), when that differs from
    ours: the last NSpid of /proc/PID/status; None when it is the same (or unknown)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    ids = line.split()[1:]
                    return int(ids[-1]) if len(ids) > 1 else None
    except (OSError, ValueError):
        pass
    return None


def is_zombie(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and bool(fields) and fields[0] in ("Z", "X")


def parent_map() -> dict[int, int]:
    """pid -> ppid for every process we can see."""
    out: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for name in entries:
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))
        if fields and len(fields) > 1:
            out[int(name)] = int(fields[1])
    return out


def children(pid: int) -> list[int] | None:
    """pid's children, from /proc/PID/task/*/children (each thread lists the children it forked);
    None where the kernel does not provide those files (CONFIG_PROC_CHILDREN)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []  # gone
    out: list[int] = []
    for tid in tasks:
        try:
            out += [int(x) for x in read_file(f"/proc/{pid}/task/{tid}/children").split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None
        except (OSError, ValueError):
            continue
    return sorted(set(out))


def last_pid() -> int | None:
    """The PID the kernel handed out last (in this PID namespace), from /proc/loadavg's fifth field
    (proc(5)): any fork or new thread anywhere moves it; None where it cannot be read."""
    try:
        return int(read_file("/proc/loadavg").split()[4])
    except (OSError, ValueError, IndexError):
        return None


def descendants(pid: int) -> list[int]:
    """All descendants of pid (children first, breadth-first). Reads only the tree's own
    /proc files where the kernel lists children, else one pass over every process."""
    out: list[int] = []
    queue = [pid]
    while queue:
        kids = children(queue.pop(0))
        if kids is None:
            return _descendants_by_scan(pid)
        out += kids
        queue += kids
    return out


def _descendants_by_scan(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for child, parent in parent_map().items():
        kids.setdefault(parent, []).append(child)
    out: list[int] = []
    queue = [pid]
    while queue:
        for child in sorted(kids.get(queue.pop(0), ())):
            out.append(child)
            queue.append(child)
    return out


def process_state(pid: int, expected_start: int) -> str:
    """'alive', 'exited' (no such process or a zombie) or 'reused' (another process has the PID).
    One read of stat (this runs every cycle for each channel and capture client)."""
    try:
        fields = read_stat(pid)[1]
    except OSError:
        return "exited"
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return "exited"
    return "alive" if int(fields[19]) == expected_start else "reused"


def cmdline(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def exit_status(returncode: int) -> int:
    """A shell's exit status for a child's return code: 128 + N when signal N ended it."""
    return 128 - returncode if returncode < 0 else returncode


def how_it_ended(returncode: int) -> str:
    """'exited with code 1' / 'was killed by SIGKILL', from a child's return code."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"
