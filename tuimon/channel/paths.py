"""Where segments live: /dev/shm/tuimon-<uid>-<pid> (TUIMON_SHM_DIR overrides the folder)."""

from __future__ import annotations

import os
import re

PREFIX = "tuimon-"
_NAME = re.compile(r"^tuimon-(\d{1,10})-(\d{1,10})$")


def shm_dir() -> str:
    return os.environ.get("TUIMON_SHM_DIR") or "/dev/shm"


def segment_path(pid: int, uid: int | None = None, directory: str | None = None) -> str:
    uid = os.getuid() if uid is None else uid
    return os.path.join(directory or shm_dir(), f"{PREFIX}{uid}-{pid}")


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """(uid, pid) of a segment file name, or None if it is not one."""
    m = _NAME.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None
