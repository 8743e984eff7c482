"""Recordings: one JSON line per poll cycle, replayed through the same path live cycles take.

Format v2 (written since the typed model):
    {"format": "tuimon-recording", "version": 2, "created": <unix s>, "host": ..., "note": ...}
    <a Cycle as JSON (tuimon/model/cycle.py)>, one per line, in time order
Format v1 (read, never written): after the same header, one line per source and cycle,
    {"t": <CLOCK_MONOTONIC ns>, "source": "gpu" | "process" | "training", "data": <sample>};
its entries are grouped back into cycles. Unavailable fields are {"na": reason} in both.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO

from ..model import BadValue, Cycle, GpuSample, ProcessSample, TrainingSnapshot, from_json, to_json

FORMAT, VERSION = "tuimon-recording", 2
READS = (1, 2)
V1_SOURCES = {"gpu": "gpus", "process": "process", "training": "training"}
V1_CYCLE_GAP_NS = 200_000_000  # v1 wrote one cycle's sources a few ms apart; cycles are >= 100 ms apart


class RecordingError(Exception):
    pass


class Recorder:
    def __init__(self, path_or_file: str | IO[str], note: str = "") -> None:
        """path_or_file: a path (created or overwritten) or an open text file (standard output)."""
        self._f = open(path_or_file, "w", encoding="utf-8") if isinstance(path_or_file, str) else path_or_file
        self._write({"format": FORMAT, "version": VERSION, "created": time.time(),
                     "host": socket.gethostname(), "note": note})

    def _write(self, obj: dict) -> None:
        self._f.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def record(self, cycle: Cycle) -> None:
        self._write(to_json(cycle))
        self._f.flush()  # a full disk shows now, not at the end

    def close(self) -> None:
        self._f.flush()
        try:
            os.fsync(self._f.fileno())
        except OSError:  # a pipe or a terminal: nothing to sync
            pass
        if self._f is not sys.stdout:
            self._f.close()


class Recording:
    """A recording's header and its cycles (read lazily, once). `skipped` counts the lines that
    were not valid cycles, once they have been read."""

    def __init__(self, path: str):
        f = open(path, encoding="utf-8", errors="replace")
        try:
            header = json.loads(f.readline() or "null")
        except ValueError as e:
            f.close()
            raise RecordingError(f"{path} is not a tuimon recording (first line is not JSON)") from e
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            f.close()
            raise RecordingError(f"{path} is not a tuimon recording")
        if header.get("version") not in READS:
            f.close()
            raise RecordingError(f"{path} is recording format v{header.get('version')}; "
                                 f"this tuimon reads v{READS[0]} to v{READS[-1]}")
        self.path, self.header, self._f = path, header, f
        self.version = header["version"]
        self.skipped = 0
        self.cycles_read = 0

    def cycles(self) -> Iterator[Cycle]:
        lines = self._lines()
        source = _v1_cycles(lines, self) if self.version == 1 else (self._v2(x) for x in lines)
        for c in source:
            if c is not None:
                self.cycles_read += 1
                yield c

    def _lines(self) -> Iterator[dict]:
        with self._f:
            for line in self._f:
                try:
                    obj = json.loads(line)
                except ValueError:
                    self.skipped += 1
                    continue
                if isinstance(obj, dict):
                    yield obj
                else:
                    self.skipped += 1

    def _v2(self, obj: dict) -> Cycle | None:
        try:
            c = from_json(Cycle, obj)
        except BadValue:
            c = None
        if c is None or c.t <= 0:
            self.skipped += 1
            return None
        return c


def _v1_cycles(lines: Iterator[dict], rec: Recording) -> Iterator[Cycle]:
    parts: dict = {}
    first_t = 0
    for e in lines:
        source, t = e.get("source"), e.get("t")
        if source not in V1_SOURCES or not isinstance(t, int) or isinstance(t, bool):
            rec.skipped += 1
            continue
        try:
            data = _v1_data(source, e.get("data"))
        except BadValue:
            rec.skipped += 1
            continue
        key = V1_SOURCES[source]
        if parts and (key in parts or t - first_t > V1_CYCLE_GAP_NS):
            yield Cycle(t=first_t, **parts)
            parts = {}
        if not parts:
            first_t = t
        parts[key] = data
    if parts:
        yield Cycle(t=first_t, **parts)


def _v1_data(source: str, data: object) -> list[GpuSample] | ProcessSample | TrainingSnapshot:
    if source == "gpu":
        if not isinstance(data, list):
            raise BadValue("gpu data is not a list")
        return [from_json(GpuSample, g) for g in data]
    if source == "process":
        return from_json(ProcessSample, data)
    return from_json(TrainingSnapshot, data)


class ReplaySource:
    """Feeds recorded cycles to a callback, paced as recorded (speed 2.0: twice as fast; 0: as
    fast as possible)."""

    def __init__(self, path: str, speed: float = 1.0):
        self.recording = Recording(path)
        self.speed = speed

    def run(self, on_cycle: Callable[[Cycle], object], stop: threading.Event | None = None) -> int:
        n = 0
        first_t, start = None, 0.0  # the first cycle's time, and when it was played
        for c in self.recording.cycles():
            if stop is not None and stop.is_set():
                break
            if self.speed > 0:
                if first_t is None:
                    first_t, start = c.t, time.monotonic()
                delay = (c.t - first_t) / 1e9 / self.speed - (time.monotonic() - start)
                if delay > 0:
                    if stop is not None:
                        if stop.wait(delay):
                            break
                    else:
                        time.sleep(delay)
            on_cycle(c)
            n += 1
        return n
