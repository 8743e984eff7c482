"""Drains one process's segment into steps and ranges that the analysis layer summarises."""

from __future__ import annotations

import time

from ..analysis import summary
from ..analysis.steps import StepAccumulator
from ..channel import SegmentReader


class ChannelSource:
    """Not thread-safe: one poller thread drains it (the UI reads snapshots it produced)."""

    def __init__(self, reader: SegmentReader, history_steps: int = 2000):
        self.reader = reader
        self.steps = StepAccumulator(history_steps)
        self.records_read = 0
        # Start at the oldest record still in the ring: what came before is history, not loss.
        reader.seek_recent(reader.info.ring_records)

    def poll(self) -> int:
        """Drain what is new; returns the number of records read."""
        batch = self.reader.drain()
        self.steps.add(batch.records)
        self.records_read += len(batch.records)
        return len(batch.records)

    def snapshot(self, window_steps: int = 100) -> dict:
        r = self.reader
        info = r.info
        steps = self.steps.window(window_steps)
        name = r.name
        meta = info.meta
        return {
            "pid": info.pid,
            "state": r.process_state(),
            "closed": r.closed,
            "argv": meta.get("argv"),
            "rank": meta.get("rank"),
            "world_size": meta.get("world_size"),
            "uptime_s": round((time.monotonic_ns() - info.created_ns) / 1e9, 3),
            "steps": r.steps,
            "window_steps": len(steps),
            "step_time_ms": summary.step_time_ms(steps),
            "steps_per_s": summary.steps_per_second(steps),
            "data_wait_share": _round(summary.data_wait_share(steps)),
            "breakdown": summary.breakdown(steps, name),
            "ranges": summary.range_table(steps, name),
            "throughput_per_s": summary.throughput(steps, name),
            "records": self.records_read,
            "dropped": r.total_lost,
            "corrupt": r.total_corrupt,
        }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 4)
