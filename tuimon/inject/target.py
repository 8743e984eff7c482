"""Whether tuimon may load its probe into a process, and how: every check that can refuse, made
before anything touches the process. A refusal says what is wrong and what grants it.

What is read: /proc/PID (owner, executable, mapped libraries), Yama's ptrace_scope, the process's
channel. The interpreter's version comes from its libpython mapping or, for a static build, from
its executable asked directly (`python -I -S -c ...`: no site, no environment of the job's)."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass

from ..channel import discovery, procinfo
from ..channel.paths import segment_path

MIN_VERSION = (3, 10)  # the oldest Python the probe runs on (pyproject's requires-python)
REMOTE_EXEC_VERSION = (3, 14)  # PEP 768: sys.remote_exec, the interpreter's own safe point
PTRACE_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"


class Refused(Exception):
    """Nothing was done to the process; str() says why and what would grant it."""


@dataclass(frozen=True)
class Target:
    pid: int
    exe: str  # the interpreter, as /proc/PID/exe names it
    version: tuple[int, int]
    uid: int

    @property
    def how(self) -> str:
        """'remote_exec' (3.14 and later) or 'ptrace' (a loader through pyinjector)."""
        return "remote_exec" if self.version >= REMOTE_EXEC_VERSION else "ptrace"


def check(pid: int, need_torch: bool = True) -> Target:
    """The process as tuimon would inject it, or Refused (need_torch=False: any CPython, for the
    tests that run the loader in interpreters without torch; the probe itself then says no torch)."""
    if pid <= 0 or not os.path.isdir(f"/proc/{pid}"):
        raise Refused(f"no process {pid}")
    if procinfo.is_zombie(pid):
        raise Refused(f"process {pid} has exited (a zombie its parent has not reaped)")
    uid = _owner(pid)
    me = os.geteuid()
    if me != 0 and uid != me:
        raise Refused(f"process {pid} belongs to uid {uid}: tuimon loads its probe only into your own processes "
                      "(or run it as root)")
    _ptrace_allowed(pid, me)
    if _has_probe(pid, uid):
        raise Refused(f"process {pid} already runs tuimon's probe: `tuimon attach {pid}` shows it")
    maps = _maps(pid)
    exe = _exe(pid)
    version = _version(pid, exe, maps)
    if version < MIN_VERSION:
        raise Refused(f"process {pid} runs Python {version[0]}.{version[1]}: the probe needs 3.10 or later")
    if need_torch and not any("libtorch_python" in line or "/torch/_C." in line for line in maps):
        raise Refused(f"process {pid} has not imported torch: tuimon's probe watches PyTorch loops "
                      "(`tuimon attach` without --inject still shows its GPUs, processes and hot lines)")
    return Target(pid=pid, exe=exe, version=version, uid=uid)


def _owner(pid: int) -> int:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError as e:
        raise Refused(f"process {pid} cannot be read: {e.strerror}") from e


def _ptrace_allowed(pid: int, me: int) -> None:
    """Yama's rule (the kernel's ptrace_scope): 0 any process of yours, 1 only your descendants
    without CAP_SYS_PTRACE, 2 only with CAP_SYS_PTRACE, 3 none at all."""
    try:
        scope = int(procinfo.read_file(PTRACE_SCOPE).strip() or b"0")
    except (OSError, ValueError):
        return  # no Yama: the owner check above is the kernel's rule
    grant = f"(`echo 0 | sudo tee {PTRACE_SCOPE}`, or run tuimon as root)"
    if scope >= 3:
        raise Refused(f"ptrace is disabled on this machine (Yama ptrace_scope {scope}: no process may trace another, "
                      "until reboot)")
    if scope == 2 and me != 0:
        raise Refused("ptrace needs CAP_SYS_PTRACE here (Yama ptrace_scope 2): run tuimon as root")
    if scope == 1 and me != 0 and os.getpid() not in _ancestors(pid):
        raise Refused(f"ptrace is limited to your own child processes here (Yama ptrace_scope 1) {grant}")


def _ancestors(pid: int) -> set[int]:
    out, p = set(), procinfo.parent(pid)
    while p and p not in out:
        out.add(p)
        p = procinfo.parent(p)
    return out


def _has_probe(pid: int, uid: int) -> bool:
    """A live segment of this process (an exited or reused one is an earlier process's)."""
    path = segment_path(pid, uid)
    return os.path.exists(path) and discovery.segment_state(path) == "alive"


def _maps(pid: int) -> list[str]:
    try:
        return procinfo.read_file(f"/proc/{pid}/maps").decode(errors="replace").splitlines()
    except OSError as e:
        raise Refused(f"the memory map of process {pid} cannot be read ({e.strerror}): "
                      "ptrace access is needed") from e


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError as e:
        raise Refused(f"the executable of process {pid} cannot be read ({e.strerror}): ptrace access is needed") from e


_LIBPYTHON = re.compile(r"libpython(\d)\.(\d+)(t?)[^/]*\.so")


def _version(pid: int, exe: str, maps: list[str]) -> tuple[int, int]:
    """CPython's version from its libpython mapping, or by asking its executable."""
    for line in maps:
        m = _LIBPYTHON.search(line)
        if m:
            if m.group(3):
                raise Refused(f"process {pid} runs a free-threaded CPython ({m.group(1)}.{m.group(2)}t): "
                              "the probe does not support it")
            return int(m.group(1)), int(m.group(2))
    if exe.endswith(" (deleted)"):
        raise Refused(f"the executable of process {pid} was deleted since it started: its Python cannot be told")
    try:
        out = subprocess.run([exe, "-I", "-S", "-c", "import sys; print(sys.implementation.name, *sys.version_info[:2], "
                              "int(not getattr(sys, '_is_gil_enabled', lambda: True)()))"],
                             capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
        name, major, minor, free = out.stdout.split()
    except (OSError, ValueError, subprocess.SubprocessError):
        raise Refused(f"process {pid} is not a Python interpreter ({exe})") from None
    if name != "cpython":
        raise Refused(f"process {pid} runs {name}, not CPython: tuimon can load its probe into CPython only")
    if free == "1":
        raise Refused(f"process {pid} runs a free-threaded CPython: the probe does not support it")
    return int(major), int(minor)
