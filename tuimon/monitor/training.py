"""What a training process says about itself through its channel, as steps and summaries."""

from __future__ import annotations

import time

from ..analysis import anatomy, summary
from ..analysis.steps import StepAccumulator
from ..model import TrainingSnapshot
from ..sources.channel import ChannelSource


class TrainingView:
    def __init__(self, source: ChannelSource, history_steps: int = 256):  # >= the windows below
        self.source = source
        self.steps = StepAccumulator(history_steps)

    def poll(self) -> int:
        """Drain what is new; returns the number of records read. Raises ChannelError when the
        segment became unreadable."""
        batch = self.source.poll()
        self.steps.add(batch.records)
        return len(batch.records)

    def snapshot(self, window_steps: int = 100) -> TrainingSnapshot:
        r = self.source.reader
        info = r.info
        steps = self.steps.window(window_steps)
        name = r.name
        meta = info.meta
        share = summary.data_wait_share(steps)
        state = r.process_state()
        return TrainingSnapshot(
            pid=info.pid,
            state=state,
            closed=r.closed,
            argv=list(meta.argv),
            argv_cut=meta.argv_cut,
            rank=meta.rank,
            world_size=meta.world_size,
            local_rank=meta.local_rank,
            capture_kind=meta.capture_kind,
            probe_hot_path=meta.hot_path,
            uptime_s=round((_end_ns(r, state) - info.created_ns) / 1e9, 3),
            steps=r.steps,
            window_steps=len(steps),
            step_time_ms=summary.step_time_ms(steps),
            steps_per_s=summary.steps_per_second(steps),
            data_wait_share=None if share is None else round(share, 4),
            breakdown=summary.breakdown(steps, name),
            ranges=summary.range_table(steps, name),
            throughput_per_s=summary.throughput(steps, name),
            recent_step_ms=[round(x.duration_ns / 1e6, 3) for x in list(self.steps.completed)[-120:]],
            records=self.source.records_read,
            dropped=r.total_lost,
            corrupt=r.total_corrupt,
            phases=anatomy.phases(steps, name),
            gpu=anatomy.gpu_times(steps, name),
            syncs=anatomy.syncs(steps, name),
            comm=anatomy.comm(steps, name),
            memory=anatomy.memory(self.steps.gauges, name),
            dataloader_workers=anatomy.dataloader_workers(self.steps.gauges, name),
            ddp_backward_ms=anatomy.ddp_backward_ms(self.steps.gauges, name),
            loop_tid=steps[-1].tid if steps else None,
        )


def _end_ns(reader, state: str) -> int:
    """Now, or when the process stopped: its clean exit, else its last sign of life (the probe's
    control thread beats every 0.2 s), so the uptime stops with the process."""
    now = time.monotonic_ns()
    if state == "alive":
        return now
    last = max(reader.closed_ns, reader.heartbeat_ns)
    return last if 0 < last <= now else now
