"""Corrupted, truncated and hostile segments: a clear ChannelError, never a crash."""

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuimon.channel import ChannelError, CorruptSegment, IncompatibleSegment, SegmentReader, SegmentWriter
from tuimon.channel import layout as L
from tuimon.channel.control import open_control
from tuimon.channel.meta import JobMeta

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def valid_segment_bytes() -> bytes:
    w = SegmentWriter.create(JobMeta(argv=("x",)), 64)
    for i in range(100):
        w.emit(L.RANGE, i % 3, w.intern(f"r{i % 7}"), 1, i, i, i + 1, 0.0)
    with open(w.path, "rb") as f:
        data = f.read()
    w.unlink()
    data = bytearray(data)
    L.U32.pack_into(data, 52, FAKE_PID)  # the writer's pid, as the file name below says
    return bytes(data)


FAKE_PID = 4194304  # above any pid_max: the name never vouches for a live process


def write_segment(shm_dir, data: bytes) -> str:
    path = os.path.join(shm_dir, f"tuimon-{os.getuid()}-{FAKE_PID}")
    with open(path, "wb") as f:
        f.write(data)
    return path


def read_everything(path: str) -> None:
    """Open, drain and resolve every name; only ChannelError may come out."""
    try:
        r = SegmentReader(path)
    except ChannelError as e:
        assert str(e)
        return
    try:
        for _ in range(2):
            for rec in r.drain().records:
                assert isinstance(r.name(rec[3]), str)
        r.process_state()
        _ = (r.steps, r.closed, r.info.meta)
    except ChannelError as e:
        assert str(e)
    finally:
        r.close()


@pytest.fixture(scope="module")
def valid(tmp_path_factory):
    os.environ["TUIMON_SHM_DIR"] = str(tmp_path_factory.mktemp("v"))
    return valid_segment_bytes()


@FUZZ
@given(data=st.binary(min_size=0, max_size=12000))
def test_random_bytes(shm_dir, data):
    read_everything(write_segment(shm_dir, data))


@FUZZ
@given(edits=st.lists(st.tuples(st.integers(0, L.RING_OFFSET + 64 * 48 - 1), st.binary(min_size=1, max_size=9)),
                      min_size=1, max_size=12))
def test_mutated_valid_segment(shm_dir, valid, edits):
    data = bytearray(valid)
    for at, patch in edits:
        data[at : at + len(patch)] = patch
    read_everything(write_segment(shm_dir, bytes(data)))


@FUZZ
@given(cut=st.integers(0, 120_000))
def test_truncated_segment(shm_dir, valid, cut):
    read_everything(write_segment(shm_dir, valid[:cut]))


@FUZZ
@given(field=st.sampled_from([16, 24, 28, 32, 36, 40, 44, 48, 72, 76]), value=st.integers(0, 2**32 - 1))
def test_lengths_and_offsets_pointing_anywhere(shm_dir, valid, field, value):
    data = bytearray(valid)
    L.U32.pack_into(data, field, value)
    read_everything(write_segment(shm_dir, bytes(data)))


@FUZZ
@given(head=st.integers(0, 2**64 - 1), names_used=st.integers(0, 2**64 - 1))
def test_hostile_counters(shm_dir, valid, head, names_used):
    data = bytearray(valid)
    L.U64.pack_into(data, L.OFF_RING_HEAD, head)
    L.U64.pack_into(data, L.OFF_NAMES_USED, names_used)
    read_everything(write_segment(shm_dir, bytes(data)))


def test_wrong_magic_and_newer_version_have_clear_messages(shm_dir, valid):
    data = bytearray(valid)
    data[0:8] = b"NOTTUIMO"
    with pytest.raises(CorruptSegment, match="not a tuimon channel segment"):
        SegmentReader(write_segment(shm_dir, bytes(data)))
    data = bytearray(valid)
    L.U32.pack_into(data, 8, L.LAYOUT_VERSION + 1)
    with pytest.raises(IncompatibleSegment, match=f"newer tuimon .*layout v{L.LAYOUT_VERSION + 1}.*reads layout v{L.LAYOUT_VERSION}"):
        SegmentReader(write_segment(shm_dir, bytes(data)))


@pytest.mark.parametrize("read", ["drain", "head", "steps", "heartbeat", "closed", "name", "control state",
                                  "control request"])
def test_a_segment_shrunk_under_the_reader(shm_dir, valid, read):
    """Every read a monitor makes after another process truncated the file: a clear error. (Through
    a mapping each of these would fault with SIGBUS and kill the monitor: CI saw it once.)"""
    path = write_segment(shm_dir, valid)
    r = SegmentReader(path)
    ctl, view = open_control(path)
    os.truncate(path, 0)
    reads = {"drain": r.drain, "head": lambda: r.head, "steps": lambda: r.steps,
             "heartbeat": lambda: r.heartbeat_ns, "closed": lambda: r.closed, "name": lambda: r.name(3),
             "control state": ctl.read_state, "control request": lambda: ctl.write_request(1, L.CAPTURE_STEPS, 5)}
    with pytest.raises(CorruptSegment, match="shrank"):
        reads[read]()
    r.close()
    view.close()


def test_a_corrupt_record_is_never_returned(shm_dir, valid):
    data = bytearray(valid)
    slot = L.RING_OFFSET + 10 * L.RECORD_SIZE
    data[slot] = 99  # an unknown kind
    L.U64.pack_into(data, slot + L.RECORD_SIZE + 40, 12345)  # and a wrong sequence number
    r = SegmentReader(write_segment(shm_dir, bytes(data)))
    b = r.drain()
    # 100 records in a ring of 64: slots 10 and 11 hold records 74 and 75.
    assert b.corrupt == 2 and len(b.records) == 63 - 2
    assert {x[9] for x in b.records}.isdisjoint({74, 75})
