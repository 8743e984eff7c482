"""Python processes of this user that hold a GPU context (NVML says which) and have no tuimon
channel: what `tuimon ls` lists below the channels, each with how to put the probe in. psutil reads
the processes (imported by `ls` alone: the monitor's start does not pay for it)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import psutil

# the interpreter's file name: python, python3, python3.11, python3.13t, python3.11d
_PYTHON = re.compile(r"^python(?:\d+(?:\.\d+)?)?[a-z]?$")


@dataclass(frozen=True)
class GpuPython:
    pid: int
    gpus: tuple[int, ...]  # NVML indices
    command: str  # its command line, as the job's own text (show it through safe_text)


def without_probe(gpu_pids: Mapping[int, Iterable[int]], probed: AbstractSet[int],
                  uid: int | None = None) -> list[GpuPython]:
    """Of the processes NVML says hold a GPU context (pid -> GPUs), those of this user (its real
    uid) that run CPython and have no channel (probed: the PIDs that have one), nor an ancestor
    with one (a worker of a job whose channel is listed already), by PID."""
    uid = os.getuid() if uid is None else uid
    out = []
    for pid, gpus in sorted(gpu_pids.items()):
        if pid in probed:
            continue
        try:
            p = psutil.Process(pid)
            with p.oneshot():
                if p.uids().real != uid or not _is_python(p):
                    continue
                command = " ".join(p.cmdline())
                if any(a.pid in probed for a in p.parents()):
                    continue
        except psutil.Error:  # gone, or not ours to read (another PID namespace's number)
            continue
        out.append(GpuPython(pid=pid, gpus=tuple(sorted(set(gpus))), command=command))
    return out


def _is_python(p: psutil.Process) -> bool:
    """Its executable is a Python interpreter, or its command's first word names one (the process's
    name is no guide: PyTorch names its main thread pt_main_thread)."""
    try:
        exe = p.exe()
    except psutil.AccessDenied:
        exe = ""
    argv = p.cmdline()
    return any(_PYTHON.match(os.path.basename(path)) for path in (exe, argv[0] if argv else "") if path)
