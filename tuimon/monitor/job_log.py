"""The output of a job tuimon launched: where it goes, and its last lines, read once the job has
exited (shown with why it ended)."""

from __future__ import annotations

from ..model import ProcessSample

TAIL_BYTES, TAIL_LINES = 64 * 1024, 40  # of the output of a job tuimon started, read once it exited


class JobLog:
    def __init__(self, path: str | None):
        """path: the job's output file (None: tuimon did not launch it, nothing to read)."""
        self.path = path
        self._tail: list[str] | None = None

    def tail(self, process: ProcessSample | None) -> list[str]:
        """The last TAIL_LINES lines (of the last TAIL_BYTES), read once, at the first cycle that
        finds the process exited; [] while it runs."""
        if self.path is None or process is None or process.alive:
            return []
        if self._tail is None:
            try:
                with open(self.path, "rb") as f:
                    f.seek(0, 2)
                    f.seek(max(0, f.tell() - TAIL_BYTES))
                    lines = f.read().decode("utf-8", "replace").splitlines()
                self._tail = lines[-TAIL_LINES:]
            except OSError as e:
                self._tail = [f"(cannot read {self.path}: {e.strerror})"]
        return self._tail
