"""What a training process says about itself through its channel, as steps and summaries."""

from __future__ import annotations

import time

from ..analysis import summary
from ..analysis.steps import StepAccumulator
from ..sources.channel import ChannelSource


class TrainingView:
    def __init__(self, source: ChannelSource, history_steps: int = 256):  # >= the windows below
        self.source = source
        self.steps = StepAccumulator(history_steps)

    def poll(self) -> int:
        """Drain what is new; returns the number of records read."""
        batch = self.source.poll()
        self.steps.add(batch.records)
        return len(batch.records)

    def snapshot(self, window_steps: int = 100) -> dict:
        r = self.source.reader
        info = r.info
        steps = self.steps.window(window_steps)
        name = r.name
        meta = info.meta
        share = summary.data_wait_share(steps)
        return {
            "pid": info.pid,
            "state": r.process_state(),
            "closed": r.closed,
            "argv": meta.get("argv"),
            "rank": meta.get("rank"),
            "world_size": meta.get("world_size"),
            "capture_kind": meta.get("capture_kind"),
            "probe_hot_path": meta.get("hot_path"),
            "uptime_s": round((time.monotonic_ns() - info.created_ns) / 1e9, 3),
            "steps": r.steps,
            "window_steps": len(steps),
            "step_time_ms": summary.step_time_ms(steps),
            "steps_per_s": summary.steps_per_second(steps),
            "data_wait_share": None if share is None else round(share, 4),
            "breakdown": summary.breakdown(steps, name),
            "ranges": summary.range_table(steps, name),
            "throughput_per_s": summary.throughput(steps, name),
            "recent_step_ms": [round(x.duration_ns / 1e6, 3) for x in list(self.steps.completed)[-120:]],
            "records": self.source.records_read,
            "dropped": r.total_lost,
            "corrupt": r.total_corrupt,
        }
