"""`tuimon inject PID` and `tuimon attach PID --inject`: load the probe into a running job (every
rank of it on this node when PID is a launcher), then say what happened, one line a process."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ..channel import procinfo
from ..inject import NotLoaded, Pending, Refused, inject

if TYPE_CHECKING:
    import argparse

# What loading costs, said before it is done (docs/injection.md has the numbers behind it)
WHAT_IT_DOES = ("loads tuimon's probe into the running job: hooks on its modules, optimizers, DataLoaders and "
                "syncs; a pause of a few milliseconds on its main thread; about 1% of step time after")


def cmd_inject(args: argparse.Namespace) -> int:
    return load(args.pid, args.wait)


def load(pid: int, wait_s: float) -> int:
    """Inject into pid's training processes; 0 if the probe runs in each, 2 otherwise (said why)."""
    targets = training_processes(pid)
    failed = False
    for target in targets:
        try:
            done = inject(target, wait_s)
        except Pending as e:
            print(f"tuimon: {target}: {e}", file=sys.stderr)
            failed = True
        except (Refused, NotLoaded) as e:
            print(f"tuimon: {target}: not loaded: {e}", file=sys.stderr)
            failed = True
        else:
            print(f"tuimon: probe loaded into {target} in {done.seconds:.2f} s (steps are counted from its first "
                  f"whole step on): tuimon attach {pid}", file=sys.stderr)
    return 2 if failed else 0


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
