"""Capture summaries, made one at a time on a worker thread of their own (never on the sampler
thread), each by a child process that a timeout or the monitor quitting stops."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from ..capture.summary import TIMEOUT_S, summarize
from ..model import CaptureStatus, CaptureSummary

RECHECK_WAITING_S = 5.0  # nsys writes its report some time after the window closed


class SummaryWorker:
    def __init__(self, make: Callable[..., CaptureSummary] = summarize, timeout: float = TIMEOUT_S):
        self._make, self.timeout = make, timeout
        self._jobs: queue.Queue = queue.Queue()
        self._done: dict[tuple, tuple[float, CaptureSummary]] = {}  # (seq, path) -> (when, summary)
        self._queued: set[tuple] = set()
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None

    def summary(self, status: CaptureStatus) -> CaptureSummary:
        """The summary of a done capture if it is made, else 'pending' (and it is asked for).
        Never blocks."""
        key = (status.seq, status.path)
        done = self._done.get(key)
        if done is not None:
            when, s = done
            if s.state != "waiting" or time.monotonic() - when < RECHECK_WAITING_S:
                return s
        if key not in self._queued:
            self._queued.add(key)
            self._jobs.put((key, status))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tuimon-summaries", daemon=True)
                self._thread.start()
        return done[1] if done is not None else CaptureSummary(state="pending", file=status.path or None,
                                                              lines=["reading the capture..."])

    def _run(self) -> None:
        while not self._cancel.is_set():
            try:
                key, status = self._jobs.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                s = self._make(status, timeout=self.timeout, cancel=self._cancel)
            except Exception as e:  # noqa: BLE001 - a bug here must not end the worker
                s = CaptureSummary(state="failed", file=status.path or None,
                                   error=f"summary failed: {type(e).__name__}: {e}")
            self._done[key] = (time.monotonic(), s)
            self._queued.discard(key)

    def stop(self) -> None:
        """Stop the worker and kill a summary being made (the monitor is quitting)."""
        self._cancel.set()
