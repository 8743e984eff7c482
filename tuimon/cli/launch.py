"""Launching a training command with the probe installed and no change to its code."""

from __future__ import annotations

import os
import re
import sys
import tempfile
from typing import TextIO

import tuimon

BOOT_DIR = os.path.join(os.path.dirname(tuimon.__file__), "probe", "boot")
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(tuimon.__file__)))


KINETO_QUIET = "6"  # Kineto's log level in a job tuimon starts: above all of its levels (VERBOSE 0 .. ERROR,
# STAGE, then USDT), whose USDT lines ("profiler_start", "profiler_stop") it writes into the job's stderr at every
# torch.profiler window, the default level (torch sets ERROR) included. Read by libkineto when it loads: set here,
# before the job imports torch. (Its ERROR lines go too: they sit below USDT.)


def probe_env(base: dict | None = None, kineto: bool = True) -> dict:
    """The environment that makes every Python process of the job (torchrun ranks and spawned
    workers too) start with the probe: our sitecustomize first on PYTHONPATH; it chains to the
    environment's own sitecustomize. kineto: Kineto's daemon client on (kineto_env)."""
    env = dict(os.environ if base is None else base)
    if kineto:
        kineto_env(env)
    parts = [BOOT_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != BOOT_DIR]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["TUIMON_PACKAGE_ROOT"] = PACKAGE_ROOT
    env["TUIMON_RUN"] = "1"
    env.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET)  # (a level the job set itself stays)
    return env


def kineto_env(env: dict) -> None:
    """KINETO_USE_DAEMON=1, so that torch's Kineto polls the host's "dynolog" endpoint (tuimon's,
    capture/kineto_daemon.py) for on-demand traces: windows that do not pause the loop (issue 41).
    Kineto reads it once, as torch is imported. Kineto's own log lines (a line every 10 s while no
    endpoint answers) are kept out of the job's output with KINETO_LOG_LEVEL=6 (above its highest
    severity), unless the job's environment sets either variable itself. Only with TUIMON_KINETO=1:
    the daemon mode alone (Kineto's poll, its step hook) showed no cost beyond the noise on an H200
    (benchmarks/kineto_daemon_cost.py, two pairs a loop: 0.975, 1.050; 0.998, 0.996), but a
    torch.profiler session after a Kineto window killed the job there (SIGSEGV), and a job's own
    profiler is beyond tuimon's refusal (capture/backends.py): the job is not put at that risk unasked."""
    if env.get("TUIMON_KINETO") != "1" or "KINETO_USE_DAEMON" in env:
        return
    env["KINETO_USE_DAEMON"] = "1"
    env.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET)


def command(argv: list[str]) -> list[str]:
    """The job's argv as it is run. An executable file runs as it is: the kernel honours its
    `#!` line, so the job gets its own interpreter and torch (the probe reaches it through
    PYTHONPATH). Only a `.py` script that cannot be executed so (no x bit, or no `#!` line) gets
    an interpreter: the python its `#!` line names, else tuimon's own."""
    if not argv or not argv[0].endswith(".py") or not os.path.isfile(argv[0]):
        return list(argv)  # (a command: found on PATH as a shell would)
    script = argv[0] if os.sep in argv[0] else os.path.join(os.curdir, argv[0])  # (train.py: the one here)
    shebang = _shebang(script)
    if os.access(script, os.X_OK) and shebang:
        return [script, *argv[1:]]
    return [*(shebang if shebang and _names_python(shebang) else [sys.executable]), script, *argv[1:]]


def _shebang(path: str) -> list[str]:
    """The interpreter a script's `#!` line names, and its one argument as the kernel passes it
    (`#!/usr/bin/env python3` -> ['/usr/bin/env', 'python3']); [] without one."""
    try:
        with open(path, "rb") as f:
            line = f.readline(256)
    except OSError:
        return []
    if not line.startswith(b"#!"):
        return []
    return os.fsdecode(line[2:]).strip().split(None, 1)


def _names_python(shebang: list[str]) -> bool:
    """Whether a `#!` line runs a python (`/opt/venv/bin/python`, `/usr/bin/env python3.11`)."""
    name = os.path.basename(shebang[0])
    if name == "env":  # (its first word that is no option and no VAR=value: env -S python3 -u)
        name = next((w for w in " ".join(shebang[1:]).split() if not w.startswith("-") and "=" not in w), "")
    return re.fullmatch(r"python[\d.]*", os.path.basename(name)) is not None


def job_log() -> tuple[TextIO, str]:
    """(file, path): a private file for the output of a job tuimon started: the TUI holds the
    terminal, and the plain lines go to a stdout that a reader (`| head`) may close."""
    folder = os.path.join(tempfile.gettempdir(), f"tuimon-{os.getuid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix="job-", suffix=".log", dir=folder)
    return os.fdopen(fd, "w"), path  # (the file object's .name would be the descriptor number)


def log_tail(path: str, lines: int = 8) -> list[str]:
    """The last lines of a job's log (what a failed job said last), [] if it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 16384))
            return f.read().decode("utf-8", "replace").splitlines()[-lines:]
    except OSError:
        return []
