"""Where a command's `-o PATH` writes: the one rule for every file tuimon writes (trace, record,
baseline save).

- `-`: standard output.
- A regular file, or a new one: written beside it first and renamed over it (a crash or a full
  disk never leaves half a file where a good one was), or, for a stream (record), written in
  place; an existing one only with --force.
- A FIFO or a character device (/dev/null, a terminal, /dev/stdout): opened and written in place,
  never replaced.
- A symlink: written through to its target, by the same rules; the link itself is never replaced.
  One that leads nowhere is refused.
- Anything else (a folder, a block device, a socket), an empty name, a missing folder or one that
  cannot be written: refused before any work, with the reason (OutputError: exit code 2).
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

STDOUT = "-"


class OutputError(Exception):
    """Why -o cannot be written, in a line."""


@dataclass(frozen=True)
class Output:
    path: str  # as given
    target: str  # the file written: path, or the regular file a symlink leads to
    regular: bool  # a regular file (new or not); else standard output, a FIFO or a character device


def check(path: str, force: bool) -> Output:
    """Where path writes (module docstring), or OutputError saying why it cannot be written."""
    if path == STDOUT:
        return Output(path, path, regular=False)
    if not path:
        raise OutputError("-o is empty: a file's name, or - for standard output")
    try:
        st = os.stat(path)  # (follows symlinks: what a write would reach)
    except FileNotFoundError:
        if os.path.islink(path):
            raise OutputError(f"{path} is a symlink to {os.readlink(path)}, which does not exist: -o writes "
                              "through a symlink only to an existing file") from None
        _try_create(path, path)  # a new file: is its folder there, and writable?
        return Output(path, path, regular=True)
    except OSError as e:  # (a path through a file, a loop of links, no permission)
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from None
    if stat.S_ISREG(st.st_mode):
        if not force:
            raise OutputError(f"{path} exists: --force to overwrite it, or another -o")
        target = os.path.realpath(path) if os.path.islink(path) else path
        if target != path and not os.path.samestat(st, _stat(target)):
            raise OutputError(f"{path} is a symlink whose target could not be found by its name")
        _try_create(path, target)
        return Output(path, target, regular=True)
    if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode):
        return Output(path, path, regular=False)
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{path} is a folder: -o names a file (e.g. {os.path.join(path, 'out.json')})")
    kind = "a block device" if stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else \
        "not a file"
    raise OutputError(f"{path} is {kind}: -o writes a file, a FIFO or a character device such as /dev/null")


@contextlib.contextmanager
def opened(path: str, force: bool, binary: bool = False, in_place: bool = False) -> Iterator[IO]:
    """path opened for writing by the rule above (checked again: it may have changed since).
    A regular file is written whole on a clean exit (in_place: written as it goes, truncated
    first). Standard output is flushed, never closed. OutputError before anything is written;
    OSError while writing."""
    out = check(path, force)
    if out.path == STDOUT:
        f = sys.stdout.buffer if binary else sys.stdout
        yield f
        f.flush()
        return
    mode = "wb" if binary else "w"
    encoding = None if binary else "utf-8"
    if not out.regular:  # a FIFO or a device: opened as it is, never created or replaced
        fd = os.open(out.target, os.O_WRONLY | os.O_NOCTTY)
        with open(fd, mode, encoding=encoding) as f:
            yield f
        return
    if in_place:
        with open(out.target, mode, encoding=encoding) as f:
            yield f
        return
    tmp = _tmp_name(out.target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)  # (the umask applies)
    try:
        with open(fd, mode, encoding=encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out.target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def words_to(path: str) -> IO[str]:
    """Where a command says what it wrote: standard output, unless the data went there or to
    another stream (a FIFO, a device, /dev/stdout): then standard error, never into the data."""
    if path == STDOUT:
        return sys.stderr
    try:
        return sys.stdout if stat.S_ISREG(os.stat(path).st_mode) else sys.stderr
    except OSError:
        return sys.stderr


def _tmp_name(target: str) -> str:
    return f"{target}.tmp{os.getpid()}"


def _stat(path: str) -> os.stat_result:
    try:
        return os.stat(path)
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from None


def _try_create(path: str, target: str) -> None:
    """Whether a file can be made beside target (its folder exists and is writable, the disk is
    not read-only), found by making and removing the temporary file opened() writes first."""
    tmp = _tmp_name(target)
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        os.unlink(tmp)
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from None
