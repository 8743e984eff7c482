"""Which processes of a job the probe is loaded into: the job itself, or the ranks below its launcher."""

from __future__ import annotations

from ..channel import procinfo


def training_processes(pid: int) -> list[int]:
    """The processes to load the probe into: pid's topmost descendants that run torch and were started,
    not forked (torchrun's ranks, a shell's python; a DataLoader worker is a fork of its loop, with
    the same command line), or pid itself when it has none."""
    found: list[int] = []
    for child in sorted(procinfo.descendants(pid)):
        cmd, parent = procinfo.cmdline(child), procinfo.parent(child)
        if not cmd or parent is None or cmd == procinfo.cmdline(parent) or _spawned_worker(cmd):
            continue
        if _runs_torch(child) and not _below(child, found, pid):
            found.append(child)
    return found or [pid]


def _spawned_worker(cmd: list[str]) -> bool:
    """A multiprocessing child started by spawn or forkserver (a DataLoader worker of such a loop)."""
    return any("multiprocessing.spawn" in a or "multiprocessing.forkserver" in a or "multiprocessing.resource_tracker"
               in a for a in cmd)


def _runs_torch(pid: int) -> bool:
    try:
        maps = procinfo.read_file(f"/proc/{pid}/maps")
    except OSError:
        return False
    return b"libtorch_python" in maps


def _below(pid: int, ancestors: list[int], stop: int) -> bool:
    p = procinfo.parent(pid)
    while p and p != stop:
        if p in ancestors:
            return True
        p = procinfo.parent(p)
    return False
