"""Which thread of the job the loader is loaded on, and when: never one stopped inside the C
library or the dynamic loader.

pyinjector stops one thread with ptrace and makes it call dlopen(), which allocates. A thread
stopped inside malloc (or inside ld.so, or any allocator) would re-enter it half-way: glibc aborts
("malloc assertion failure in sysmalloc", seen here injecting the main thread of a loop that was
starting its DataLoader workers). So:
1. a thread blocked in a system call that waits (a condition variable's futex, poll, a read, a
   sleep) is chosen first, the main thread last (it runs the loop);
2. once stopped, the thread is looked at again: in such a system call, or running code outside
   libc, ld.so and any allocator library (the address of its next instruction, against the
   process's memory map), it is loaded; otherwise it is let go and another moment or thread tried.
The only C-library wait this cannot tell apart is a futex taken inside malloc for an arena another
thread holds; that thread, not stopped, releases it, and dlopen's allocation waits for it as any
allocation would."""

from __future__ import annotations

import os
import platform
import time
from typing import Any

from ..channel import procinfo

TRIES = 300  # about 3 s of tries (a sleep of 10 ms between them)

# system calls that wait, by number (x86_64, aarch64): a thread blocked in one is between operations
_WAITING = {
    "x86_64": {0: "read", 7: "poll", 23: "select", 34: "pause", 35: "nanosleep", 45: "recvfrom", 47: "recvmsg",
               61: "wait4", 202: "futex", 230: "clock_nanosleep", 232: "epoll_wait", 270: "pselect6", 271: "ppoll",
               281: "epoll_pwait", 441: "epoll_pwait2"},
    "aarch64": {22: "epoll_pwait", 63: "read", 72: "pselect6", 73: "ppoll", 98: "futex", 101: "nanosleep",
                115: "clock_nanosleep", 207: "recvfrom", 212: "recvmsg", 260: "wait4", 441: "epoll_pwait2"},
}
_UNSAFE = ("/libc.so", "/libc-", "/ld-linux", "/ld-", "malloc", "/libpthread")  # code a stopped thread may not be in


class NoQuietThread(Exception):
    """No thread of the job was found at a safe point within TRIES."""


def load_on_a_quiet_thread(pyinjector: Any, pid: int, lib: bytes) -> None:
    waiting = _WAITING.get(platform.machine(), {})
    for _ in range(TRIES):
        for tid in _candidates(pid, waiting):
            with pyinjector.attach(tid) as injector:  # (the thread is stopped from here to the end of the block)
                if _safe(pid, tid, waiting):
                    injector.inject(lib)
                    return
        time.sleep(0.01)
    raise NoQuietThread(f"no thread of process {pid} stopped at a safe point in {TRIES} tries (each was inside the "
                        "C library or the dynamic loader): nothing was loaded; try again")


def _candidates(pid: int, waiting: dict[int, str]) -> list[int]:
    """The job's threads, those blocked in a waiting system call first, the main thread last."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return [pid]
    blocked = [t for t in tids if t != pid and _syscall(pid, t)[0] in waiting]
    return blocked[:4] + [pid]


def _syscall(pid: int, tid: int) -> tuple[int, int]:
    """(the system call the thread is in or -1, the address of its next instruction or 0) from
    /proc/PID/task/TID/syscall; (-2, 0) while it runs or cannot be read."""
    try:
        fields = procinfo.read_file(f"/proc/{pid}/task/{tid}/syscall").split()
    except OSError:
        return -2, 0
    if not fields or fields[0] == b"running":
        return -2, 0
    try:
        return int(fields[0]), int(fields[-1], 16)
    except ValueError:
        return -2, 0


def _safe(pid: int, tid: int, waiting: dict[int, str]) -> bool:
    nr, pc = _syscall(pid, tid)
    if nr in waiting:
        return True
    if nr != -1 or not pc:  # in another system call (a write, an mmap), or unknown
        return False
    where = _mapping(pid, pc)
    return where is not None and not any(u in where for u in _UNSAFE)


def _mapping(pid: int, address: int) -> str | None:
    """The path of the mapping that holds address ('' for an anonymous one: JIT code), or None."""
    try:
        maps = procinfo.read_file(f"/proc/{pid}/maps").decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in maps:
        parts = line.split(maxsplit=5)
        lo, _, hi = parts[0].partition("-")
        if int(lo, 16) <= address < int(hi, 16):
            return parts[5] if len(parts) > 5 else ""
    return None
