"""The channel a live session shows in detail, and the job's ranks: found when it appears (looked
for again every REDISCOVER_S while it is not there), switched to rank 0 once a launcher's ranks
show channels, to the rank the UI asks for, or to the new process of a rank that restarted, and
dropped when it breaks (the next look reopens it)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from ..capture.client import CaptureRefused
from ..channel import ChannelError, NoSegment, SegmentReader
from ..channel.paths import segment_path
from ..model import NA, TrainingSnapshot
from ..sources.channel import ChannelSource
from . import ranks as job_ranks
from .target import describe, open_channel
from .training import TrainingView

REDISCOVER_S = 1.0  # how often to look for a channel that is not there (a /proc scan)


class ChannelFinder:
    """pid: the process asked for (None: no process, `tuimon top`); timeline: every view keeps its
    steps one by one; on_change: called when the shown channel is dropped or another rank is shown
    (what belonged to the shown process, its capture client, goes with it)."""

    def __init__(self, pid: int | None, timeline: bool = False, on_change: Callable[[], None] | None = None):
        self.pid, self.timeline = pid, timeline
        self._on_change = on_change
        self.training: TrainingView | None = None  # the channel shown in detail
        self.channel: str | NA | None = NA("not looked for yet") if pid else None
        self.shown_why: str | None = None  # why the channel shown is not the asked process's own
        self.ranks: job_ranks.RankSet | None = None  # every rank of a multi-process job
        self._want_rank: int | None = None  # the rank the UI asked to see in detail
        self._looked_at = 0.0
        self._unreadable: str | None = None  # why the channel found at the last look could not be read

    def why_none(self) -> str:
        """What to tell the user who asks the shown process for something while none is shown."""
        return self.channel.reason if isinstance(self.channel, NA) else "no channel to the process yet"

    # -- finding it -------------------------------------------------------------------------------

    def view(self, problems: dict, pids: set[int] | None = None) -> TrainingView | None:
        """The view to show this cycle, if there is a channel; pids: the process tree this cycle's
        process sample found, if it found one. A channel that cannot be read goes in problems."""
        if self.training is not None and self.pid and self._shows_a_launcher(self.training):
            self._look_for_ranks(self.pid, pids)
        if self.training is not None or not self.pid:
            return self.training
        now = time.monotonic()
        if now - self._looked_at < REDISCOVER_S and self._looked_at:
            if self._unreadable:
                problems["channel"] = self._unreadable  # still so, as of the last look
            return None
        self._looked_at = now
        self._unreadable = None
        try:
            reader, why = open_channel(self.pid)
        except NoSegment as e:
            self.channel = NA(str(e))
            return None
        except ChannelError as e:  # there is one, but it cannot be read: that is a problem
            self.channel = NA(str(e))
            problems["channel"] = self._unreadable = str(e)
            return None
        return self._show(self.pid, reader, why)

    def _show(self, pid: int, reader: SegmentReader, why: str | None) -> TrainingView:
        """pid: the process asked for (self.pid); reader: its channel, or one of its ranks'."""
        self.training = TrainingView(ChannelSource(reader))
        self.training.timeline = self.timeline
        self.channel, self.shown_why = reader.path, why
        root = job_ranks.job_root(pid, reader)
        if root is not None:
            self.ranks = job_ranks.RankSet(root, self.training, self.timeline)
        return self.training

    def _shows_a_launcher(self, shown: TrainingView) -> bool:
        """The channel shown is the asked process's own and has no rank: a launcher (torchrun) whose
        ranks may not have started when it was found, or a job of one process."""
        info = shown.source.reader.info
        return self.ranks is None and info.pid == self.pid and info.meta.rank is None

    def _look_for_ranks(self, pid: int, pids: set[int] | None) -> None:
        """Every REDISCOVER_S: once a ranked descendant has a channel, show it (rank 0) instead.
        pids: the tree as sampled this cycle; while none of them has a channel, nothing to open (a
        job of one process, its DataLoader workers: the look walked the tree and /dev/shm again); pid:
        the process asked for (self.pid)."""
        now = time.monotonic()
        if now - self._looked_at < REDISCOVER_S:
            return
        self._looked_at = now
        if pids is not None and not any(os.path.exists(segment_path(p)) for p in pids - {pid}):
            return
        try:
            reader, why = open_channel(pid)
        except ChannelError:
            return
        if why is None:  # still its own channel
            reader.close()
            return
        self.drop()
        self._looked_at = now
        self._show(pid, reader, why)

    def drop(self) -> None:
        """Close the shown channel and the ranks' (it broke: the next look opens it again)."""
        if self.ranks is not None:
            self.ranks.close(keep=self.training)
            self.ranks = None
        if self.training is not None:
            try:
                self.training.source.reader.close()
            except OSError:
                pass
        if self._on_change is not None:
            self._on_change()
        self.training = None
        self._looked_at = 0.0

    # -- the rank shown -----------------------------------------------------------------------------

    def next_rank(self) -> str:
        """(from the UI thread) Show the next rank in detail, from the next cycle on; what to tell
        the user. Raises CaptureRefused (the Session's refusal) for a job of one process."""
        if self.ranks is None:
            raise CaptureRefused("one process: no other rank to show")
        ranks = self.ranks.ranks()
        shown = self.training.source.reader.info.meta.rank if self.training is not None else None
        want = self._want_rank if self._want_rank is not None else shown
        later = [r for r in ranks if want is None or r > want]
        self._want_rank = later[0] if later else ranks[0]
        return f"showing rank {self._want_rank} from the next sample"

    def detail(self, view: TrainingView, training: TrainingSnapshot) -> tuple[TrainingView, TrainingSnapshot]:
        """Switch the detail to the rank asked for, or to the new process of the shown rank when
        it restarted; returns the view and snapshot to show."""
        ranks = self.ranks
        if ranks is None:  # (one process: nothing to switch to)
            return view, training
        want = self._want_rank if self._want_rank is not None else training.rank
        other = ranks.view_of_rank(want) if want is not None else None
        if other is None or other is view:
            return view, training
        self.training = other
        if self._on_change is not None:
            self._on_change()  # (a window goes to the rank shown)
        self.channel = other.source.reader.path
        pid = other.source.reader.info.pid  # (the job's root: the launcher, whichever PID was asked for)
        self.shown_why = None if pid == self.pid else f"rank {want} of the job under PID {ranks.root}: {describe(pid)}"
        other.poll()
        return other, other.snapshot()
