"""The hot path's two implementations (C extension and pure Python) behave the same, byte for byte."""

import mmap
import threading

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tuimon.channel import layout as L
from tuimon.channel import ring_py

try:
    from tuimon.channel import _fastring
except ImportError:  # no compiler where tuimon was installed: only the Python path exists
    _fastring = None

IMPLS = [pytest.param(ring_py, id="python"),
         pytest.param(_fastring, id="c", marks=pytest.mark.skipif(_fastring is None, reason="C extension not built"))]

RING_AT, HEAD_AT, STEPS_AT, RECORDS = 4096, 192, 136, 64


@pytest.fixture
def buf():
    m = mmap.mmap(-1, RING_AT + RECORDS * L.RECORD_SIZE)
    yield m


@pytest.fixture(params=IMPLS)
def impl(request):
    yield request.param
    request.param.bind(None)
    request.param.set_depth(0)


def records(m, n=None):
    head = L.U64.unpack_from(m, HEAD_AT)[0]
    first = max(0, head - RECORDS) if n is None else head - n
    return [L.RECORD.unpack_from(m, RING_AT + (i % RECORDS) * L.RECORD_SIZE) for i in range(first, head)]


def test_emit_writes_layout_records_and_publishes_the_head(buf):
    """Both implementations leave identical bytes for the same records, wrap included."""
    images = []
    for impl in (ring_py, _fastring) if _fastring else (ring_py,):
        m = mmap.mmap(-1, len(buf))
        w = impl.RingWriter(m, RING_AT, RECORDS, HEAD_AT, STEPS_AT)
        for i in range(100):
            w.emit(L.RANGE, i % 300, i + 1, 7, 3, 10 * i, 10 * i + 5, float(i) / 3)
        w.emit(L.COUNT, 300, 1, 2, 3, 4, 5)  # value defaults to 0.0; depth clamps to 255
        assert w.head == 101 and w.enabled and w.error is None
        rs = records(m)
        assert rs[-2] == (L.RANGE, 99, 0, 100, 7, 3, 990, 995, 33.0, 99)
        assert rs[-1] == (L.COUNT, 255, 0, 1, 2, 3, 4, 5, 0.0, 100)
        images.append(bytes(m))
    assert len(set(images)) == 1


@pytest.mark.parametrize("bad", [(L.RANGE, 0, 2**32, 0, 0, 0, 0, 0.0), (L.RANGE, 0, -1, 0, 0, 0, 0, 0.0),
                                 (256, 0, 1, 0, 0, 0, 0, 0.0), ("x", 0, 1, 0, 0, 0, 0),
                                 (L.RANGE, 0, 1, 0, 0, 0, 0, "v"), (L.RANGE, 0, 1, 0, 0, 2**63, 0, 0.0)])
def test_a_bad_value_disables_the_writer_instead_of_raising(impl, buf, bad):
    w = impl.RingWriter(buf, RING_AT, RECORDS, HEAD_AT, STEPS_AT)
    w.emit(*bad)
    assert not w.enabled and w.error and w.head == 0
    w.emit(L.RANGE, 0, 1, 0, 0, 0, 0, 0.0)
    assert w.head == 0 and L.U64.unpack_from(buf, HEAD_AT)[0] == 0


def test_writer_resumes_from_the_published_head(impl, buf):
    L.U64.pack_into(buf, HEAD_AT, 1000)
    w = impl.RingWriter(buf, RING_AT, RECORDS, HEAD_AT, STEPS_AT)
    w.emit(L.STEP, 0, 0, 1, 1, 0, 1)
    assert w.head == 1001 and records(buf, 1)[0][9] == 1000


def test_range_nests_per_thread_and_stamps_the_current_step(impl, buf):
    w = impl.RingWriter(buf, RING_AT, RECORDS, HEAD_AT, STEPS_AT)
    names, interned = {"known": 1}, []

    def intern(name):
        interned.append(name)
        names[name] = len(names) + 1
        return names[name]

    impl.bind(w, names, intern)
    L.U64.pack_into(buf, STEPS_AT, 4)  # four steps done: records belong to step 5
    with impl.Range("known") as r:
        assert r.name == "known" and impl.depth() == 1
        with impl.Range(42):  # any object: its str() is the name
            assert impl.depth() == 2

        def other():
            with impl.Range("known"):
                pass
            seen.append(impl.depth())

        seen = []
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert impl.depth() == 0 and seen == [0]
    rs = records(buf)
    assert [(x[0], x[1], x[3], x[5]) for x in rs] == [(L.RANGE, 1, 2, 5), (L.RANGE, 0, 1, 5), (L.RANGE, 0, 1, 5)]
    assert interned == ["42"]
    inner, on_thread, outer = rs
    assert outer[7] >= on_thread[7] >= on_thread[6] >= inner[7] >= inner[6] >= outer[6]
    assert outer[4] == inner[4] == threading.get_native_id() == impl.thread_id() != on_thread[4]


def test_range_forwards_to_nvtx_and_survives_a_failing_one(impl, buf):
    w = impl.RingWriter(buf, RING_AT, RECORDS, HEAD_AT, STEPS_AT)
    calls = []

    def push(name):
        calls.append(("push", name))
        raise RuntimeError("nvtx broke")

    impl.bind(w, {"a": 1}, lambda n: 0, push, lambda: calls.append(("pop",)))
    with impl.Range("a"):
        pass
    assert calls == [("push", "a"), ("pop",)] and w.head == 1 and w.enabled


def test_range_writes_nothing_unbound_disabled_or_rebound(impl, buf):
    w = impl.RingWriter(buf, RING_AT, RECORDS, HEAD_AT, STEPS_AT)
    with impl.Range("a"):  # no probe: nothing to do
        pass
    impl.bind(w, {"a": 1}, lambda n: 0)
    with impl.Range("a"):
        impl.bind(None)  # e.g. a fork's child detached meanwhile
    assert w.head == 0 and impl.depth() == 0
    impl.bind(w, {"a": 1}, lambda n: 0)
    w.disable("stopped")
    with impl.Range("a"):
        pass
    assert w.head == 0 and w.error == "stopped"


def test_a_name_whose_str_fails_is_not_an_error(impl):
    class Bad:
        def __str__(self):
            raise RuntimeError("no")

    assert impl.Range(Bad()).name == "(unprintable name)"


def test_a_raising_body_still_records_and_propagates(impl, buf):
    w = impl.RingWriter(buf, RING_AT, RECORDS, HEAD_AT, STEPS_AT)
    impl.bind(w, {"a": 1}, lambda n: 0)
    with pytest.raises(ZeroDivisionError):
        with impl.Range("a"):
            raise ZeroDivisionError
    assert w.head == 1 and impl.depth() == 0


def test_rebinding_from_inside_a_callback_is_safe(impl, buf):
    """The NVTX pop and intern callbacks run Python code, which may drop the binding (another
    thread, a fork handler): the range in flight still ends cleanly."""
    w = impl.RingWriter(buf, RING_AT, RECORDS, HEAD_AT, STEPS_AT)
    impl.bind(w, {}, lambda n: impl.bind(None) or 7, None, lambda: impl.bind(w, {}, lambda n: impl.bind(None) or 7))
    with impl.Range("a"):
        pass
    assert w.head == 1 and records(buf)[0][3] == 7
    impl.bind(w, {"b": 2}, lambda n: 0, None, lambda: impl.bind(None))
    with impl.Range("b"):
        pass
    assert w.head == 2 and records(buf)[1][3] == 2


def test_unpack_records_keeps_what_checks_out(impl):
    recs = [(L.RANGE, 1, 0, 5, 7, 3, 10**12 + i, 10**12 + i + 5, i / 4, 100 + i) for i in range(10)]
    data = bytearray(b"".join(L.RECORD.pack(*r) for r in recs))
    assert impl.unpack_records(bytes(data), 100) == (recs, 0)
    assert impl.unpack_records(b"", 5) == ([], 0)
    data[3 * 48 + 40] ^= 1  # record 3: wrong sequence number (torn or overwritten)
    data[7 * 48] = 99  # record 7: unknown kind
    kept, corrupt = impl.unpack_records(bytes(data), 100)
    assert corrupt == 2 and kept == [r for i, r in enumerate(recs) if i not in (3, 7)]
    assert impl.unpack_records(bytes(data), 101) == ([], 10)  # every position off by one


@pytest.mark.skipif(_fastring is None, reason="C extension not built")
@settings(max_examples=300, deadline=None)
# sequence numbers never wrap: the record after 2**64 - 1 is not number 0
@example(raw=L.RECORD.pack(1, 0, 0, 0, 0, 0, 0, 0, 0.0, 2**64 - 1) + L.RECORD.pack(1, 0, 0, 0, 0, 0, 0, 0, 0.0, 0),
         first=2**64 - 1, draw=None)
@given(st.binary(max_size=48 * 8), st.integers(0, 2**64 - 1), st.data())
def test_unpack_records_c_and_python_agree_on_any_bytes(raw, first, draw):
    data = raw[: len(raw) - len(raw) % 48]
    if data and draw is not None and draw.draw(st.booleans()):  # often make the sequence numbers line up
        data = b"".join(data[i:i + 40] + ((first + i // 48) % 2**64).to_bytes(8, "little")
                        for i in range(0, len(data), 48))
    assert _fastring.unpack_records(data, first) == ring_py.unpack_records(data, first)
