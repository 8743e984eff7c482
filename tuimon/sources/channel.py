"""The channel as a source: drains one process's segment, remembering what was lost."""

from __future__ import annotations

from ..channel import Batch, SegmentReader


class ChannelSource:
    """Not thread-safe: one poller thread drains it."""

    def __init__(self, reader: SegmentReader):
        self.reader = reader
        self.records_read = 0
        # Start at the oldest record still in the ring: what came before is history, not loss.
        reader.seek_recent(reader.info.ring_records)

    def poll(self, limit: int | None = None) -> Batch:
        """What was written since the last poll (at most `limit` records: the oldest)."""
        batch = self.reader.drain(limit)
        self.records_read += len(batch.records)
        return batch

    def skim(self, keep_steps: int, kinds: frozenset[int]) -> Batch:
        """Of what the ring holds before its newest `keep_steps` steps, the records of `kinds`
        (SegmentReader.skim): a first poll that unpacks the steps shown, not the ring's whole past."""
        batch, passed = self.reader.skim(keep_steps, kinds)
        self.records_read += passed
        return batch
