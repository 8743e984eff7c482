"""monitor/stalls.py alone: a stalled loop's stacks are asked of its probe once, then every
STACKS_EVERY_S while it stays stalled; a loop that steps is never asked; a segment gone is no
error. The job is a real segment of this process: the request is read back from its control block."""

from tuimon.channel import SegmentReader, SegmentWriter
from tuimon.channel.control import open_control
from tuimon.channel.meta import JobMeta
from tuimon.model import TrainingSnapshot
from tuimon.monitor.stalls import STACKS_EVERY_S, StallWatch
from tuimon.monitor.training import TrainingView
from tuimon.sources.channel import ChannelSource

# the bar is 5x the longest step and at least 20 s (analysis/thresholds.py STALL_FACTOR, STALL_FLOOR)
STALLED = TrainingSnapshot(pid=1, steps=40, since_step_s=21.0, longest_step_ms=100.0)
STEPPING = TrainingSnapshot(pid=1, steps=40, since_step_s=19.0, longest_step_ms=100.0)
SLOW_BUT_STEPPING = TrainingSnapshot(pid=1, steps=40, since_step_s=40.0, longest_step_ms=10_000.0)  # bar: 50 s


def asked(path: str) -> int:
    ctl, view = open_control(path)
    try:
        return ctl.stacks_request()
    finally:
        view.close()


def job():
    w = SegmentWriter.create(JobMeta(argv=("train.py",)), 64)
    return w, TrainingView(ChannelSource(SegmentReader(w.path)))


def test_a_stalled_loop_is_asked_once_then_every_so_often():
    assert STACKS_EVERY_S == 10.0
    w, view = job()
    try:
        now = [100.0]
        watch = StallWatch(clock=lambda: now[0])
        assert watch.check(view, STALLED, None) is True and asked(w.path) == 1
        now[0] += 9.9
        assert watch.check(view, STALLED, None) is False and asked(w.path) == 1  # (within 10 s: not again)
        now[0] += 0.1  # 10 s later, still stalled: again
        assert watch.check(view, STALLED, None) is True and asked(w.path) == 2
        every_time = StallWatch(every_s=0.0)
        assert every_time.check(view, STALLED, None) and every_time.check(view, STALLED, None) and asked(w.path) == 4
    finally:
        view.source.reader.close()
        w.unlink()


def test_a_loop_that_steps_is_not_asked():
    w, view = job()
    try:
        watch = StallWatch(every_s=0.0)
        for snap in (STEPPING, SLOW_BUT_STEPPING, TrainingSnapshot(pid=1, state="exited", steps=40, since_step_s=99.0)):
            assert watch.check(view, snap, None) is False
        assert asked(w.path) == 0
    finally:
        view.source.reader.close()
        w.unlink()


def test_a_segment_gone_is_no_error():
    w, view = job()
    w.unlink()
    try:
        assert StallWatch().check(view, STALLED, None) is False  # (the next poll says the channel is gone)
    finally:
        view.source.reader.close()
