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


CAPTURE_FLOOR_BYTES = 1 << 30  # a capture is refused below 1 GiB free (TUIMON_CAPTURE_MIN_FREE_MB)
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


_absolute: dict[str, str] = {}  # the folder as configured -> its absolute path, fixed at its first use


def captures_dir(create: bool = True) -> str:
    """Where capture files go: TUIMON_CAPTURE_DIR, else ~/.cache/tuimon/captures; private (0700).
    Always absolute: a relative folder is resolved once, against the working directory of the
    first call (the probe makes it at start), so a job that changes directory still writes where
    it started and the path it reports means the same to the monitor."""
    given = os.environ.get("TUIMON_CAPTURE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tuimon",
                                                                 "captures")
    d = _absolute.get(given)
    if d is None:
        d = _absolute[given] = os.path.abspath(given)
    if create:
        os.makedirs(d, mode=0o700, exist_ok=True)
        os.chmod(d, 0o700)
    return d


def capture_floor_bytes() -> int:
    mb = os.environ.get("TUIMON_CAPTURE_MIN_FREE_MB")
    return int(mb) * 2**20 if mb and mb.isdigit() else CAPTURE_FLOOR_BYTES


def free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def safe_file_part(text: str, limit: int = 40) -> str:
    """A piece of a file name built from untrusted text: letters, digits, '.', '_' and '-' only."""
    return _SAFE.sub("_", text).strip("._")[:limit] or "job"


def program_name(cmd: list[str]) -> str:
    """What a command runs, for file names: the script (train.py), the module after -m, or the
    executable."""
    for k, a in enumerate(cmd):
        if a.endswith(".py"):
            return os.path.basename(a)
        if a == "-m" and k + 1 < len(cmd):
            return cmd[k + 1].rsplit(".", 1)[-1]
    return os.path.basename(cmd[0]) if cmd else "job"
