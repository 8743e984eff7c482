"""monitor/channel_finder.py alone: the channel a live session shows and the job's ranks. Real
segments: this process's own (the target), and child processes that each create one with a rank
(a launcher's ranks; tests/test_ranks.py runs real torchrun-like jobs through the whole session)."""

import os
import subprocess
import time

import pytest

from tests.conftest import python, seg_path
from tuimon.capture.client import CaptureRefused
from tuimon.channel import SegmentWriter
from tuimon.channel.meta import JobMeta
from tuimon.model import NA
from tuimon.monitor.channel_finder import REDISCOVER_S, ChannelFinder

RANK = """
import sys, time
from tuimon.channel import SegmentWriter
from tuimon.channel.meta import JobMeta
w = SegmentWriter.create(JobMeta(argv=("train.py",), rank=int(sys.argv[1]), world_size=2), 64)
print("up", flush=True)
time.sleep(120)
"""


def start_ranks():
    """Two children of this process, ranks 0 and 1 of a job of 2, each with its channel."""
    procs = [python(RANK, r, stdout=subprocess.PIPE, text=True) for r in (0, 1)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "up"
    except BaseException:
        stop(procs)
        raise
    return procs


def stop(procs):
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture
def ranks():
    procs = start_ranks()
    yield procs
    stop(procs)


def opened(path: str) -> int:
    """How many of this process's file descriptors are open on path."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}") == path
        except OSError:
            pass  # (the listing's own fd, closed since)
    return n


def finder(pid=None):
    changes = []
    f = ChannelFinder(os.getpid() if pid is None else pid, on_change=lambda: changes.append(1))
    return f, changes


def test_no_channel_is_said_and_looked_for_again_every_second():
    f, _ = finder()
    problems: dict = {}
    assert f.view(problems) is None and problems == {}
    assert isinstance(f.channel, NA) and "has no tuimon channel" in f.channel.reason
    assert f.why_none() == f.channel.reason
    w = SegmentWriter.create(JobMeta(argv=("train.py",)), 64)
    try:
        assert f.view(problems) is None  # (looked less than REDISCOVER_S ago)
        time.sleep(REDISCOVER_S)
        view = f.view(problems)
        assert view is not None and view is f.training and f.view(problems) is view
        assert (f.channel, f.shown_why, f.ranks, problems) == (w.path, None, None, {})
        assert view.source.reader.info.pid == os.getpid()
    finally:
        w.unlink()


def test_an_unreadable_channel_is_a_problem_until_it_is_read(shm_dir):
    with open(seg_path(shm_dir, os.getpid()), "wb") as fh:
        fh.write(b"\xff" * 100)
    f, _ = finder()
    problems: dict = {}
    assert f.view(problems) is None and "truncated" in problems["channel"] and isinstance(f.channel, NA)
    again: dict = {}
    assert f.view(again) is None and again == problems  # (still so, as of the last look)


def test_drop_closes_the_channel_and_the_next_look_reopens_it():
    w = SegmentWriter.create(JobMeta(argv=("train.py",)), 64)
    try:
        f, changes = finder()
        writers = opened(w.path)  # (the writer's own)
        first = f.view({})
        assert opened(w.path) > writers
        f.drop()
        assert f.training is None and changes == [1]
        assert opened(w.path) == writers
        second = f.view({})  # (at once: a dropped channel is looked for again without waiting)
        assert second is not None and second is not first and changes == [1]
    finally:
        w.unlink()


def test_no_process_no_channel():
    f = ChannelFinder(None)
    assert f.view({}) is None and f.channel is None and f.why_none() == "no channel to the process yet"
    with pytest.raises(CaptureRefused, match="one process: no other rank to show"):
        f.next_rank()


def test_a_launcher_shows_rank_0_and_n_switches_to_rank_1(ranks):
    f, changes = finder()  # (this process is the launcher: no channel of its own)
    view = f.view({})
    assert view.source.reader.info.pid == ranks[0].pid and f.ranks is not None and f.ranks.root == os.getpid()
    assert f.shown_why.startswith(f"PID {os.getpid()}: it has no channel; showing its descendant rank 0 PID {ranks[0].pid}")
    view.poll()
    snap = view.snapshot()
    assert f.detail(view, snap) == (view, snap)  # (the rank shown is the one wanted)
    f.ranks.poll(view, snap)  # (the session drains the others: rank 1 is found)
    assert f.ranks.ranks() == [0, 1]
    assert f.next_rank() == "showing rank 1 from the next sample"
    other, other_snap = f.detail(view, snap)
    assert other.source.reader.info.pid == ranks[1].pid and other_snap.rank == 1 and f.training is other
    assert changes == [1]  # (the capture client goes with the rank shown)
    assert f.channel == other.source.reader.path
    assert f.shown_why.startswith(f"rank 1 of the job under PID {os.getpid()}: PID {ranks[1].pid} (")
    assert f.next_rank() == "showing rank 0 from the next sample"  # (round again)


def test_a_launcher_with_its_own_channel_gives_way_to_rank_0():
    """A launcher instrumented too (its channel has no rank), found before its ranks started: once
    a descendant in this cycle's tree has a channel, rank 0 is shown instead."""
    w = SegmentWriter.create(JobMeta(argv=("torchrun",)), 64)
    procs = []
    try:
        f, changes = finder()
        writers = opened(w.path)  # (the writer's own)
        own = f.view({})
        assert own.source.reader.info.pid == os.getpid() and f.ranks is None and f.shown_why is None
        procs = start_ranks()
        time.sleep(REDISCOVER_S)
        assert f.view({}, {os.getpid()}) is own and changes == []  # (no channel in the tree: not opened)
        view = f.view({}, {os.getpid(), procs[0].pid, procs[1].pid})
        assert view is own  # (looked less than REDISCOVER_S ago)
        time.sleep(REDISCOVER_S)
        view = f.view({}, {os.getpid(), procs[0].pid, procs[1].pid})
        assert view.source.reader.info.pid == procs[0].pid and changes == [1] and f.ranks is not None
        assert opened(w.path) == writers  # (the launcher's own channel closed)
        assert f.shown_why.startswith(f"PID {os.getpid()}: its channel has no rank (a launcher); showing its "
                                      f"descendant rank 0 PID {procs[0].pid}")
    finally:
        stop(procs)
        w.unlink()
