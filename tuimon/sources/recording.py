"""Recordings: samples as JSON Lines, replayed through the same path the live sources feed.

Format (version 1), one JSON object per line:
    {"format": "tuimon-recording", "version": 1, "created": <unix s>, "host": ..., "note": ...}
    {"t": <CLOCK_MONOTONIC ns>, "source": "gpu" | "process" | "training", "data": <sample>}
`gpu` data is the list DeviceSampler.sample() returns, `process` a ProcessSampler sample, and
`training` a TrainingView snapshot. Unavailable fields are {"na": reason}, as live.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator

FORMAT, VERSION = "tuimon-recording", 1
SOURCES = ("gpu", "process", "training")


class RecordingError(Exception):
    pass


class Recorder:
    def __init__(self, path: str, note: str = ""):
        self._f = open(path, "w", encoding="utf-8")
        self.write_line({"format": FORMAT, "version": VERSION, "created": time.time(),
                         "host": socket.gethostname(), "note": note})

    def write_line(self, obj: dict) -> None:
        self._f.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def record(self, source: str, data, t: int | None = None) -> None:
        self.write_line({"t": time.monotonic_ns() if t is None else t, "source": source, "data": data})

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()


def read_recording(path: str) -> tuple[dict, Iterator[dict]]:
    """(header, entries in file order). Lines that are not valid entries are skipped and counted
    in header['skipped'] once the iterator is exhausted."""
    f = open(path, encoding="utf-8", errors="replace")
    try:
        header = json.loads(f.readline())
    except ValueError as e:
        f.close()
        raise RecordingError(f"{path} is not a tuimon recording (first line is not JSON)") from e
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        f.close()
        raise RecordingError(f"{path} is not a tuimon recording")
    if header.get("version") != VERSION:
        f.close()
        raise RecordingError(f"{path} is recording format v{header.get('version')}; this tuimon reads v{VERSION}")
    header["skipped"] = 0

    def entries():
        with f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    header["skipped"] += 1
                    continue
                if not isinstance(e, dict) or e.get("source") not in SOURCES or not isinstance(e.get("t"), int):
                    header["skipped"] += 1
                    continue
                yield e

    return header, entries()


class ReplaySource:
    """Feeds recorded samples to the same callbacks the live pollers feed, paced as recorded
    (speed 2.0: twice as fast; 0: as fast as possible)."""

    def __init__(self, path: str, speed: float = 1.0):
        self.header, self._entries = read_recording(path)
        self.speed = speed

    def run(self, on_entry, stop=None, with_time: bool = False) -> int:
        n = 0
        first_t = start = None
        for e in self._entries:
            if stop is not None and stop.is_set():
                break
            if self.speed > 0:
                if first_t is None:
                    first_t, start = e["t"], time.monotonic()
                delay = (e["t"] - first_t) / 1e9 / self.speed - (time.monotonic() - start)
                if delay > 0:
                    if stop is not None:
                        if stop.wait(delay):
                            break
                    else:
                        time.sleep(delay)
            if with_time:
                on_entry(e["source"], e["data"], e["t"])
            else:
                on_entry(e["source"], e["data"])
            n += 1
        return n
