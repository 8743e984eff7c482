"""The channel's promises, each checked against a real segment file."""

import errno
import mmap
import os
import stat
import subprocess
import sys

import pytest

from tests.conftest import HELPERS, seg_path, wait_for
from tuimon.channel import (
    ChannelError,
    ForeignSegment,
    SegmentReader,
    SegmentWriter,
    cleanup_stale,
    find_segments,
)
from tuimon.channel import layout as L
from tuimon.channel.meta import JobMeta
from tuimon.channel.text import safe_text
from tuimon.channel.writer import truncate_name

sys.path.insert(0, str(HELPERS))
from writer_proc import fields  # noqa: E402


def check_self_describing(records):
    """Every record is exactly what writer_proc wrote for its sequence number: never torn."""
    for r in records:
        i = r[9]
        kind, depth, nid, tid, step, t0, t1, value = fields(i)
        assert r == (kind, depth, 0, nid, tid, step, t0, t1, value, i)


def start_writer(count, rate=0, ring=1024):
    p = subprocess.Popen([sys.executable, str(HELPERS / "writer_proc.py"), str(count), str(rate), str(ring)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def test_round_trip_and_names():
    w = SegmentWriter.create(JobMeta(argv=("train.py",)), 64)
    nid = w.intern("forward")
    assert w.intern("forward") == nid
    w.emit(L.RANGE, 0, nid, 7, 1, 100, 200, 0.0)
    w.emit(L.COUNT, 0, w.intern("samples"), 7, 1, 300, 300, 32.0)
    with SegmentReader(w.path) as r:
        b = r.drain()
        assert [(x[0], r.name(x[3]), x[6], x[7], x[8]) for x in b.records] == [
            (L.RANGE, "forward", 100, 200, 0.0), (L.COUNT, "samples", 300, 300, 32.0)]
        assert (b.lost, b.corrupt) == (0, 0)
        assert r.info.pid == os.getpid() and r.info.meta.argv == ("train.py",)
        assert r.process_state() == "alive"
        assert r.drain().records == []


def test_segment_is_private_0600(shm_dir):
    old = os.umask(0)  # even with a permissive umask
    try:
        w = SegmentWriter.create(None, 64)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(w.path).st_mode) == 0o600
    assert w.path == seg_path(shm_dir, os.getpid())


def test_reader_refuses_another_users_segment():
    w = SegmentWriter.create(None, 64)
    if os.getuid() == 0:
        os.chown(w.path, 65534, -1)  # really owned by nobody
        with pytest.raises(ForeignSegment, match="belongs to uid 65534"):
            SegmentReader(w.path)
    with pytest.raises(ForeignSegment, match="tuimon reads only your own"):
        SegmentReader(w.path, expected_uid=os.getuid() + 12345)


def test_overrun_is_counted_exactly():
    w = SegmentWriter.create(None, 64)
    r = SegmentReader(w.path)
    for i in range(1000):
        w.emit(*fields(i))
    b = r.drain()
    # A full ring yields capacity - 1: the oldest slot may be the one a live writer is
    # overwriting right now, so it is counted lost rather than trusted.
    assert len(b.records) == 63 and b.lost == 1000 - 63
    assert [x[9] for x in b.records] == list(range(937, 1000))
    for i in range(1000, 1010):
        w.emit(*fields(i))
    b = r.drain()
    assert len(b.records) == 10 and b.lost == 0
    check_self_describing(b.records)
    assert r.total_lost == 937


def test_a_drain_in_parts_returns_the_same_records_and_losses_as_one():
    w = SegmentWriter.create(None, 64)
    r, whole = SegmentReader(w.path), SegmentReader(w.path)
    for i in range(1000):
        w.emit(*fields(i))
    assert r.behind == 1000
    parts = [r.drain(10)]  # (the oldest 10 slots the ring holds, the oldest of them counted lost as in one drain)
    assert [x[9] for x in parts[0].records] == list(range(937, 946)) and parts[0].lost == 937
    while r.behind:
        parts.append(r.drain(10))
    b = whole.drain()
    assert [x for p in parts for x in p.records] == b.records
    assert sum(p.lost for p in parts) == b.lost == r.total_lost and [len(p.records) for p in parts] == [9] + [10] * 5 + [4]
    assert r.drain(10).records == [] and r.behind == 0
    with pytest.raises(ValueError, match="at least one record"):
        r.drain(0)


def test_writer_never_blocks_or_raises_without_a_reader():
    w = SegmentWriter.create(None, 64)
    for i in range(100_000):  # far past the ring, nobody reading
        w.emit(*fields(i))
    assert w.records_written == 100_000 and w.enabled
    w.emit(L.RANGE, 0, 2**40, 0, 0, 0, 0, 0.0)  # a value out of range: dropped, not raised
    assert not w.enabled and "error" in w.error
    for bad in ((L.RANGE, 0, -1, 0, 0, 0, 0, 0.0), (256, 0, 1, 0, 0, 0, 0, 0.0), ("x", 0, 1, 0, 0, 0, 0),
                (L.RANGE, 0, 1, 0, 0, 0, 0, "v")):
        w = SegmentWriter.create(None, 64)
        w.emit(*bad)
        assert not w.enabled and w.error and w.records_written == 0, bad
    w = SegmentWriter.create(None, 64)
    w._mm = mmap.mmap(w._fd, 4096, prot=mmap.PROT_READ)  # a mapping we can no longer write:
    w.intern("after")
    w.set_steps(3, 1)
    assert not w.enabled and "read-write" in w.error  # the writer disables itself instead of raising
    w.emit(*fields(0))
    assert w.records_written == 0


def test_full_tmpfs_is_a_clear_error_and_leaves_nothing(monkeypatch, shm_dir):
    def no_space(fd, off, size):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    with pytest.raises(ChannelError, match="no space left"):
        SegmentWriter.create(None, 64)
    assert os.listdir(shm_dir) == []


def test_names_are_untrusted_text():
    w = SegmentWriter.create(None, 64)
    hostile = "[bold red]x[/] \x1b[2J\x07 \u202egnp.exe"
    long = "é" * 500
    ids = [w.intern(hostile), w.intern(long)]
    r = SegmentReader(w.path)
    # names stay as written (JSON escapes them); a terminal gets them through safe_text
    assert r.name(ids[0]) == hostile
    assert safe_text(r.name(ids[0])) == "[bold red]x[/] \\x1b[2J\\x07 \\u202egnp.exe"
    assert len(truncate_name(long)) <= L.MAX_NAME_BYTES and r.name(ids[1]) == "é" * 100
    assert r.name(999) == "(name #999)"


def test_name_table_full_gives_id_zero():
    w = SegmentWriter.create(None, 64)
    ids = [w.intern(f"{i:0200d}") for i in range(1400)]  # (202 bytes each: past the 256 KiB table)
    assert 0 in ids and ids[0] == 1
    assert SegmentReader(w.path).name(0) == "(unnamed)"


def test_pid_reuse_and_dead_process_last_look_and_cleanup(shm_dir):
    # A segment left by a process that exited.
    p = start_writer(10)
    assert p.stdout.readline().startswith("done")
    path = seg_path(shm_dir, p.pid)
    p.stdin.close()
    p.wait()
    r = SegmentReader(path)
    assert r.process_state() == "exited"
    assert len(r.drain().records) == 10  # readable for a last look
    [f] = find_segments(p.pid)
    assert (f.state, f.relation) == ("exited", "target")
    # A later discovery (for another process) removes it once its grace period has passed.
    assert cleanup_stale(keep={os.getpid()}, grace_s=3600) == []
    assert cleanup_stale(keep={os.getpid()}, grace_s=0) == [path]
    assert not os.path.exists(path)


def test_pid_reuse_is_detected():
    w = SegmentWriter.create(None, 64)
    real = L.HEADER.unpack_from(w._mm, 0)[12]
    L.U64.pack_into(w._mm, 56, real + 1)  # as if an earlier process with our PID wrote it
    r = SegmentReader(w.path)
    assert r.process_state() == "reused"
    assert cleanup_stale(grace_s=3600) == [w.path]  # reused PIDs go at once


def test_kill_9_of_the_writer_mid_stream(shm_dir):
    p = start_writer(0, rate=50_000, ring=1 << 16)
    r = SegmentReader(seg_path(shm_dir, p.pid))
    got = []
    wait_for(lambda: got.extend(r.drain().records) or len(got) > 5000, what="records")
    p.kill()
    p.wait()
    b = r.drain()
    got.extend(b.records)
    assert r.process_state() == "exited"
    check_self_describing(got)
    seqs = [x[9] for x in got]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))  # nothing lost, nothing repeated
    assert seqs[-1] + 1 == r.head and r.total_lost == 0
    assert r.drain().records == []


def test_a_monitor_that_exits_mid_stream_leaves_the_writer_alone(shm_dir):
    p = start_writer(0, rate=20_000, ring=1 << 12)
    path = seg_path(shm_dir, p.pid)
    reader = subprocess.Popen([sys.executable, "-c", f"""
import time
from tuimon.channel import SegmentReader
r = SegmentReader({path!r})
while True:
    r.drain(); time.sleep(0.01)
"""])
    head = SegmentReader(path)
    before = wait_for(lambda: head.head > 2000 and head.head)
    reader.kill()
    reader.wait()
    wait_for(lambda: head.head > before + 5000, what="the writer to go on")
    assert p.poll() is None
    r2 = SegmentReader(path)  # and a new monitor attaches fine
    r2.seek_recent(100)
    check_self_describing(r2.drain().records)
    p.kill()
    p.wait()


def test_concurrent_overrun_accounting_is_exact(shm_dir):
    """A small ring, a writer flat out and a slow reader: every record is either returned
    (intact) or counted as lost, never both, never torn."""
    p = start_writer(300_000, rate=0, ring=256)
    r = SegmentReader(seg_path(shm_dir, p.pid))
    got, lost = [], 0
    while True:
        b = r.drain()
        got.extend(b.records)
        lost += b.lost
        assert b.corrupt == 0
        if p.poll() is not None or r.tail >= 300_000:
            break
    p.stdin.close()
    p.wait()
    check_self_describing(got)
    seqs = [x[9] for x in got]
    assert seqs == sorted(set(seqs))
    assert len(got) + lost == 300_000 and lost > 0


def test_the_monitor_folds_a_full_ring_in_parts_as_it_would_whole(monkeypatch):
    """A job that ran a while: its ring is full (and overrun) at the first poll. The training view
    reads it in parts of DRAIN_PART records (the memory a whole ring of Python tuples held stayed
    in the monitor's RSS) and knows the same steps, gauges and step log as from one drain."""
    from tuimon.monitor import training
    from tuimon.sources.channel import ChannelSource

    w = SegmentWriter.create(JobMeta(argv=("train.py",)), 1 << 10)
    phase, gauge = w.intern("forward"), w.intern("dataloader.workers")
    for k in range(1, 301):  # 4 records a step: 1,200 records in a ring of 1,024
        t = k * 10**7
        w.emit(L.PHASE, 0, phase, 1, k, t, t, 4e6)
        w.emit(L.GAUGE, 0, gauge, 1, k, t, t, float(k % 7))
        w.emit(L.RANGE, 0, phase, 1, k, t, t + 4 * 10**6, 0.0)
        w.emit(L.STEP, 0, 0, 1, k, t, t + 10**7, 0.0)

    def folded(part):
        monkeypatch.setattr(training, "DRAIN_PART", part)
        view = training.TrainingView(ChannelSource(SegmentReader(w.path)))
        read = view.poll()
        steps = [(s.index, s.t0, s.t1, s.phases, s.range_ns) for s in view.steps.completed]
        return read, steps, view.steps.gauges, list(view.step_log.steps), view.source.reader.total_lost

    whole, parts = folded(1 << 20), folded(100)
    assert parts == whole and whole[0] == 1023 and whole[4] == 1  # (records before the ring are history, not loss)
    assert whole[1][-1][0] == 300 and whole[2] == {gauge: 300 % 7}


def test_a_first_poll_skims_the_steps_it_would_not_keep_and_knows_what_a_whole_read_knows(monkeypatch):
    """A job that ran a while: the first poll unpacks only the newest steps the view keeps, and of
    the older records what is not about one step (a gauge said once, the sampler's lines) and the
    step ends. It knows the same steps, gauges, lines, step log and longest step as a whole read."""
    from tuimon.monitor import training
    from tuimon.sources.channel import ChannelSource

    w = SegmentWriter.create(JobMeta(argv=("train.py",)), 1 << 14)
    phase, gauge, once, gpu, line = (w.intern(n) for n in ("forward", "cuda.allocated", "step.source",
                                                           "gpu.step_ns", "train.py:41"))
    w.emit(L.GAUGE, 0, once, 1, 1, 0, 0, 2.0)  # said once, before the first step
    for k in range(1, 3001):  # 4-5 records a step: ~13,000 records, all in a ring of 16,384
        t = k * 10**7 + (5 * 10**7 if k >= 400 else 0)  # (step 400 the longest: in the part passed over)
        w.emit(L.RANGE, 0, phase, 1, k, t, t + 4 * 10**6, 0.0)
        if k > 2:  # (the GPU's time of a step comes two steps late)
            w.emit(L.STEP_VALUE, 0, gpu, 1, k - 2, t, t, 3e6)
        if k % 50 == 0:
            w.emit(L.GAUGE, 0, gauge, 1, k, t, t, float(k))
        if k % 3 == 0:
            w.emit(L.HOT, 1, line, 1, k, L.HOW_PYTHON, t, 2.0)
        w.emit(L.STEP, 0, 0, 1, k, t, t + (6 * 10**7 if k == 400 else 10**7), 0.0)
        w.emit(L.PHASE, 0, phase, 1, k, t, t, 4e6)  # (as the probe: a step's phases after its end)

    skims: list[int] = []
    real_skim = ChannelSource.skim

    def counted_skim(self, keep_steps, kinds):
        batch = real_skim(self, keep_steps, kinds)
        skims.append(self.records_read)  # (what it passed over)
        return batch

    monkeypatch.setattr(ChannelSource, "skim", counted_skim)

    def first_poll(skim_above):
        monkeypatch.setattr(training, "SKIM_ABOVE", skim_above)
        view = training.TrainingView(ChannelSource(SegmentReader(w.path)))
        read = view.poll()
        steps = [(s.index, s.t0, s.t1, s.phases, s.range_ns, s.values) for s in view.steps.completed]
        return (read, steps, view.steps.gauges, view.steps.gauge_steps, {k: list(v) for k, v in view.steps.gauge_history.items()},
                list(view.steps.hot), list(view.step_log.steps), view.longest_ns, view.first_step_t0)

    whole, skimmed = first_poll(1 << 30), first_poll(training.DRAIN_PART)
    assert skims and skims[0] > 10_000  # (the skimmed view did pass over the older steps' records)
    assert skimmed == whole
    assert whole[2][once] == 2.0 and whole[7] == 6 * 10**7 and len(whole[1]) == 256 and whole[1][-1][0] == 3000
    passed = SegmentReader(w.path)
    passed.seek_recent(1 << 14)
    kept, over = passed.skim(256, frozenset((L.GAUGE,)))
    assert over > 10_000 and [r[0] for r in kept.records] == [L.GAUGE] * len(kept.records)
    assert [len(r) for r in passed.drain().records[:1]] == [10] and passed.behind == 0


def test_a_snapshots_recent_step_times_are_the_newest_steps_whatever_the_polls(monkeypatch):
    """recent_step_ms is kept as steps complete (not worked out each snapshot): the newest 120 steps'
    times, whether they came in one poll, in parts, or a few a poll; a view keeping fewer steps
    carries as many times as it keeps."""
    from tuimon.monitor import training
    from tuimon.sources.channel import ChannelSource

    w = SegmentWriter.create(JobMeta(argv=("train.py",)), 1 << 12)
    phase = w.intern("forward")
    view = training.TrainingView(ChannelSource(SegmentReader(w.path)))
    few = training.TrainingView(ChannelSource(SegmentReader(w.path)), history_steps=50)
    for k in range(1, 401):
        t = k * 10**7
        w.emit(L.PHASE, 0, phase, 1, k, t, t, 4e6)
        w.emit(L.STEP, 0, 0, 1, k, t, t + 10**7 + k * 1234 + (k % 7) * 10**5, 0.0)
        if k in (3, 4, 90, 250, 400):
            view.poll()
            want = [round(x.duration_ns / 1e6, 3) for x in list(view.steps.completed)[-120:]]
            assert view.snapshot().recent_step_ms == want and len(want) == min(k, 120)
    monkeypatch.setattr(training, "DRAIN_PART", 7)
    few.poll()
    assert few.snapshot().recent_step_ms == [round(x.duration_ns / 1e6, 3) for x in few.steps.completed]
    assert len(few.snapshot().recent_step_ms) == 50
