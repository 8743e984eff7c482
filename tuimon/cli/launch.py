"""Launching a training command with the probe installed and no change to its code."""

from __future__ import annotations

import os
import sys
import tempfile
from typing import TextIO

import tuimon

BOOT_DIR = os.path.join(os.path.dirname(tuimon.__file__), "probe", "boot")
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(tuimon.__file__)))


def probe_env(base: dict | None = None) -> dict:
    """The environment that makes every Python process of the job (torchrun ranks and spawned
    workers too) start with the probe: our sitecustomize first on PYTHONPATH; it chains to the
    environment's own sitecustomize."""
    env = dict(os.environ if base is None else base)
    parts = [BOOT_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != BOOT_DIR]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["TUIMON_PACKAGE_ROOT"] = PACKAGE_ROOT
    env["TUIMON_RUN"] = "1"
    return env


def command(argv: list[str]) -> list[str]:
    """A script path alone runs under this Python."""
    if argv and argv[0].endswith(".py"):
        return [sys.executable, *argv]
    return list(argv)


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
