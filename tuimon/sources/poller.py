"""Runs samplers on their own thread: one poll at a time, the next scheduled only after the last
one finished (so a slow NVML call delays sampling, never the caller)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

MIN_INTERVAL_S = 0.1


class Poller:
    def __init__(self, poll: Callable[[], object], on_result: Callable[[object], None],
                 interval: float = 1.0, name: str = "tuimon-poller",
                 on_error: Callable[[str], None] | None = None) -> None:
        if interval < MIN_INTERVAL_S:
            raise ValueError(f"the sampling interval is at least {MIN_INTERVAL_S} s")
        self.interval = interval
        self._poll, self._on_result, self._on_error = poll, on_result, on_error
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.cycles = 0
        self.busy_s = 0.0  # time spent inside poll(), for the cost benchmark
        self.error: str | None = None

    def start(self) -> Poller:
        self._thread.start()
        return self

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                result, failed = self._poll(), None
            except Exception as e:  # noqa: BLE001 - a sampler bug must not kill the monitor
                result, failed = None, f"{type(e).__name__}: {e}"
            self.busy_s += time.monotonic() - t0
            self.cycles += 1
            self._deliver(result, failed)
            next_at = max(next_at + self.interval, time.monotonic())
            self._stop.wait(next_at - time.monotonic())

    def _deliver(self, result: object, failed: str | None) -> None:
        try:
            if failed is not None:
                self.error = failed
                if self._on_error is not None:
                    self._on_error(failed)
            elif result is not None:
                self._on_result(result)
        except Exception as e:  # noqa: BLE001 - nor may a consumer's
            self.error = f"{type(e).__name__}: {e}"

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
