"""The step's phase clock (the probe's anatomy): C and Python behave the same, record for record,
and a step's phases add up to its duration whatever the loop does."""

import mmap
import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuimon.channel import layout as L
from tuimon.channel import phases_py, ring_py

try:
    from tuimon.channel import _fastring
except ImportError:  # no compiler where tuimon was installed: only the Python path exists
    _fastring = None

RING_AT, HEAD_AT, STEPS_AT, BEAT_AT, RECORDS = 4096, 192, 136, 128, 1024
IDS = [11, 12, 13, 14, 15, 16, 17]  # name ids of the seven phases (other, data, ..., comm)
SYNC, SYNC_COUNT = 5, 99
IMPLS = [pytest.param((ring_py, phases_py), id="python"),
         pytest.param((_fastring, _fastring), id="c",
                      marks=pytest.mark.skipif(_fastring is None, reason="C extension not built"))]
BOTH = [(ring_py, phases_py)] + ([(_fastring, _fastring)] if _fastring else [])


def clock(impl, walks=16, walk_gap=0):
    ring_mod, phases_mod = impl
    m = mmap.mmap(-1, RING_AT + RECORDS * L.RECORD_SIZE)
    w = ring_mod.RingWriter(m, RING_AT, RECORDS, HEAD_AT, STEPS_AT, BEAT_AT)
    p = phases_mod.Phases(w, IDS, SYNC_COUNT, SYNC, walks, threading.get_ident(), walk_gap)
    p.restart(1000)
    return m, w, p


def records(m):
    head = L.U64.unpack_from(m, HEAD_AT)[0]
    return [L.RECORD.unpack_from(m, RING_AT + i * L.RECORD_SIZE) for i in range(head)]


def phases_of(rs, step):
    return {IDS.index(r[3]): r[8] for r in rs if r[0] == L.PHASE and r[5] == step}


@pytest.mark.parametrize("impl", IMPLS)
def test_time_goes_to_the_innermost_phase_and_the_step_adds_up(impl):
    m, w, p = clock(impl)
    p.enter(1, 1100)      # data
    p.exit(1, 1400)
    p.enter(2, 1400)      # forward
    p.count_sync(1500, 1550)  # a sync inside forward
    p.exit(2, 1700)
    p.enter(4, 1700)      # optimizer, with backward inside (Lightning's closure)
    p.enter(3, 1750)
    p.move(3, 6, 1900, 1950)  # the end of backward was DDP's wait: comm
    p.exit(3, 1950)
    p.exit(4, 2000)
    assert p.top == 0 and p.open == [0] and p.syncs == 1
    assert p.close(1, 1000, 2100, 7) == 1
    rs = records(m)
    assert rs[0][:8] == (L.STEP, 0, 0, 0, 7, 1, 1000, 2100)
    assert phases_of(rs, 1) == {0: 200.0, 1: 300.0, 2: 250.0, 5: 50.0, 3: 150.0, 6: 50.0, 4: 100.0}
    assert sum(phases_of(rs, 1).values()) == 1100  # the step's duration
    assert [r[8] for r in rs if r[0] == L.STEP_VALUE and r[3] == SYNC_COUNT] == [1.0]
    assert L.U64.unpack_from(m, STEPS_AT)[0] == 1 and L.U64.unpack_from(m, BEAT_AT)[0] == 2100
    assert p.acc == [0] * 7 and p.syncs == 0
    p.enter(2, 2200)  # the next step starts where the last ended, the same phases open
    p.close(2, 2100, 2300, 7)
    assert phases_of(records(m), 2) == {0: 100.0, 2: 100.0}
    assert p.top == 2


@pytest.mark.parametrize("impl", IMPLS)
def test_since_is_when_the_innermost_phase_became_the_innermost(impl):
    """The step in progress is shown from it ("now: backward, 2.3 s"): a sync or a closed step
    inside a phase does not restart it; leaving an inner phase does."""
    m, w, p = clock(impl)
    p.enter(2, 1100)  # forward
    assert (p.top, p.since) == (2, 1100)
    p.count_sync(1200, 1300)
    p.close(1, 1000, 1400, 7)
    assert (p.top, p.since, p.t) == (2, 1100, 1400)
    p.enter(3, 1500)  # backward inside forward (checkpointing)
    assert p.since == 1500
    p.exit(3, 1600)
    assert (p.top, p.since) == (2, 1600)
    p.exit(1, 1650)  # an unbalanced exit of a phase not open: the innermost stays
    assert (p.top, p.since) == (2, 1600)
    p.exit(2, 1700)
    assert (p.top, p.since) == (0, 1700)


@pytest.mark.parametrize("impl", IMPLS)
def test_other_threads_unbalanced_exits_and_bad_values_are_ignored(impl):
    m, w, p = clock(impl)
    t = threading.Thread(target=lambda: (p.enter(2, 1100), p.exit(0, 1200), p.move(0, 6, 1200, 1300)))
    t.start()
    t.join()
    assert p.open == [0] and p.acc == [0] * 7
    p.enter(3, 1100)
    p.enter(2, 1200)
    p.exit(3, 1300)  # an exception skipped forward's exit: backward's entry goes, forward stays open
    assert p.open == [0, 2]
    for bad in ((99, 1), (-1, 1), ("x", 1), (2, "late")):
        p.enter(*bad)
        p.exit(*bad)
    p.move(2, 6, 1000, 900)  # before the clock's last reading: not a wait at the end of the phase
    p.move(3, 6, 1300, 1400)  # backward is not the innermost phase
    assert p.open == [0, 2] and p.acc == [100, 0, 100, 100, 0, 0, 0]
    p.reset(threading.get_ident())  # another thread took over stepping: nothing open
    assert p.open == [0]
    p.restart(5000)
    assert p.acc == [0] * 7 and p.t == 5000


@pytest.mark.parametrize("impl", IMPLS)
def test_deep_nesting_is_counted_not_tracked(impl):
    m, w, p = clock(impl)
    for k in range(100):
        p.enter(1 + k % 6, 1000 + k)
    assert len(p.open) == 64
    for k in reversed(range(100)):
        p.exit(1 + k % 6, 1300 - k)
    assert p.open == [0]
    p.close(1, 1000, 1400, 1)
    assert sum(phases_of(records(m), 1).values()) == 400


@pytest.mark.parametrize("impl", IMPLS)
def test_call_sites_are_walked_at_most_walks_times_a_step(impl):
    m, w, p = clock(impl, walks=4)
    walked = sum(p.count_sync(1000 + 10 * k, 1005 + 10 * k) for k in range(40))
    assert walked == 40  # the first step walks every sync: its count is not known yet
    assert p.close(1, 1000, 2000, 1) == 1
    assert p.period == 10  # 40 syncs a step, 4 walks
    walked = sum(p.count_sync(2000 + 10 * k, 2005 + 10 * k) for k in range(40))
    assert walked == 4 and p.close(2, 2000, 3000, 1) == 10
    p.close(3, 3000, 3100, 1)  # no syncs: every one walked again
    assert p.period == 1


@pytest.mark.parametrize("impl", IMPLS)
def test_a_disabled_ring_gets_nothing(impl):
    m, w, p = clock(impl)
    w.disable("gone")
    p.enter(2, 1100)
    p.close(1, 1000, 1200, 1)
    assert records(m) == [] and L.U64.unpack_from(m, STEPS_AT)[0] == 0


OPS = st.lists(st.tuples(st.sampled_from(["enter", "exit", "move", "sync", "synced", "data", "close"]),
                         st.integers(0, 6), st.integers(0, 6), st.integers(0, 50), st.integers(0, 50)),
               max_size=60)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_c_and_python_write_the_same_records(ops):
    """Any sequence of calls leaves the same ring, header and state in both implementations, and
    every closed step's phases add up to its duration."""
    images = []
    for impl in BOTH:
        m, w, p = clock(impl, walks=2, walk_gap=30)
        t, step, start, weights = 1000, 1, 1000, []
        for op, a, b, d0, d1 in ops:
            if op == "enter":
                t += d0
                p.enter(a, t)
            elif op == "exit":
                t += d0
                p.exit(a, t)
            elif op == "move":
                p.move(a, b, t + d0, t + d0 + d1)
                t = max(t, t + d0 + d1)
            elif op == "sync":
                p.count_sync(t + d0, t + d0 + d1)
                t += d0 + d1
            elif op == "synced":  # (b: timed or not; walks are 30 ns apart at least)
                weights.append(p.synced(t, t + d0 + d1, bool(b % 2)))
                t += d0 + d1
            elif op == "data":
                t += d0
                p.data_wait(a, t - d0, t)
            else:
                t += d0
                p.close(step, start, t, 3)
                assert sum(phases_of(records(m), step).values()) == t - start
                step, start = step + 1, t
        images.append((bytes(m), p.open, p.acc, p.syncs, p.period, p.t, p.since, p.sync_spans, weights))
    assert all(i == images[0] for i in images)


def _two_sites(a, t, steps, period_ns, offsets):
    def item_site(t0):  # the loop's .item() inside its step function
        a.sync(t0, t0 + 1000, sys._getframe())

    def sync_site(t0):  # its synchronize() in the loop
        a.sync(t0, t0 + 1000, sys._getframe())

    for k in range(steps):
        item_site(t + offsets[0])
        sync_site(t + offsets[1])
        a.close_step(k + 1, t, t + period_ns, 1)
        t += period_ns
    return item_site.__code__.co_firstlineno + 1, sync_site.__code__.co_firstlineno + 1


@pytest.mark.parametrize("period_ms", [7, 20, 50, 100, 250])
def test_every_sync_site_gets_its_share_whatever_the_loops_period(period_ms):
    """Two syncs a step, 1 ms apart, then the step's long rest: each site's sampled share within 0.1
    of its true 0.5 (issue 43: walking the first sync after a time gap named only the second, always),
    with about one walk per SITE_WALK_GAP_NS, and every sync counted."""
    from tuimon.channel import ring
    from tuimon.probe import anatomy

    m = mmap.mmap(-1, RING_AT + 65536 * L.RECORD_SIZE)
    w = ring.RingWriter(m, RING_AT, 65536, HEAD_AT, STEPS_AT, BEAT_AT)
    names: dict[str, int] = {}
    a = anatomy.Anatomy(w, lambda n: names.setdefault(n, len(names) + 1))
    t, period = 10**9, period_ms * 1_000_000
    a.restart(t)
    steps = max(400, 200 * anatomy.SITE_WALK_GAP_NS // period)
    item_line, sync_line = _two_sites(a, t, steps, period, (3_000_000, 4_000_000))
    sites = [r for r in records(m) if r[0] == L.SITE]
    by_id = {v: k for k, v in names.items()}
    weight: dict[str, float] = {}
    for r in sites:
        weight[by_id[r[3]]] = weight.get(by_id[r[3]], 0) + r[8]
    here = anatomy.short_path(__file__)
    total = sum(weight.values())
    share = {line: weight.get(f"{here}:{line}", 0) / total for line in (item_line, sync_line)}
    print(period_ms, "ms:", share, "walks", len(sites), "syncs", 2 * steps, "counted", total)
    assert share[item_line] == pytest.approx(0.5, abs=0.1) and share[sync_line] == pytest.approx(0.5, abs=0.1), share
    assert total == pytest.approx(2 * steps, rel=0.05)  # every sync stands in some walk's weight (a few owed at the end)
    walks_per_gap = len(sites) / (steps * period / anatomy.SITE_WALK_GAP_NS)
    assert walks_per_gap <= 2.0, walks_per_gap  # the cost stays bounded (about one walk per gap)


def _timed_sites(a, t, steps, period_ns, sites):
    """Two sync sites a step, each (offset, wait) of the step: the .item() in the step function
    through the timed path (the sync phase entered around it, as torch_hooks._waiting does), the
    synchronize() in the loop through Probe.synced's."""
    (item_at, item_ns), (sync_at, sync_ns) = sites

    def item_site(t0):  # the loop's .item() inside its step function
        a.enter(SYNC, t0)
        a.sync(t0, t0 + item_ns, sys._getframe(), timed=True)

    def sync_site(t0):  # its synchronize() in the loop
        a.sync(t0, t0 + sync_ns, sys._getframe())

    for k in range(steps):
        item_site(t + item_at)
        sync_site(t + sync_at)
        a.close_step(k + 1, t, t + period_ns, 1)
        t += period_ns
    return item_site.__code__.co_firstlineno + 2, sync_site.__code__.co_firstlineno + 1


@pytest.mark.parametrize("period_ms", [7, 20, 100, 250])
def test_each_sync_site_gets_its_own_share_of_the_step_time(period_ms):
    """One .item() a step waiting 30% of it, one synchronize() waiting 15%: one call a step each, so
    their counts split the sync time evenly; their own waits (SITE t0, summed by the monitor's step
    model, over the window's step time) give each its share within 0.05 (issue 43 item 3)."""
    from tuimon.analysis.anatomy import Window
    from tuimon.analysis.steps import StepAccumulator
    from tuimon.channel import ring
    from tuimon.probe import anatomy

    m = mmap.mmap(-1, RING_AT + (1 << 17) * L.RECORD_SIZE)
    w = ring.RingWriter(m, RING_AT, 1 << 17, HEAD_AT, STEPS_AT, BEAT_AT)
    names: dict[str, int] = {}
    a = anatomy.Anatomy(w, lambda n: names.setdefault(n, len(names) + 1))
    t, period = 10**9, period_ms * 1_000_000
    a.restart(t)
    # ~800 walks (one per SITE_WALK_GAP_NS): a site's share of the calls is known within ~sqrt(0.5/n) = 0.025
    # (binomial, and each walk's weight a geometric gap), the .item()'s share of the step within ~0.02
    steps = max(800, 800 * anatomy.SITE_WALK_GAP_NS // period)
    item_line, sync_line = _timed_sites(a, t, steps, period, ((period // 10, period * 3 // 10),
                                                               (period // 2, period * 15 // 100)))
    rs = records(m)
    assert w.enabled and all(type(r[6]) is int and r[6] > 0 for r in rs if r[0] == L.SITE)
    acc = StepAccumulator(history=steps)
    acc.add(rs)
    by_id = {v: k for k, v in names.items()}
    syncs = Window(list(acc.completed), lambda k: by_id.get(k, "?")).syncs()
    here = anatomy.short_path(__file__)
    top = {s.site: s for s in syncs.top}
    item, sync = top[f"{here}:{item_line}"], top[f"{here}:{sync_line}"]
    print(period_ms, "ms:", item, sync, syncs.share)
    assert syncs.share == pytest.approx(0.45, abs=1e-3)  # (the sync phase: every sync's own time, exact)
    assert item.share == pytest.approx(0.30, abs=0.05) and sync.share == pytest.approx(0.15, abs=0.05)
    assert [s.site for s in syncs.top[:2]] == [item.site, sync.site]  # the most blocked first
    assert item.per_step == pytest.approx(1.0, abs=0.15) and sync.per_step == pytest.approx(1.0, abs=0.15)


@pytest.mark.parametrize("impl", IMPLS)
def test_a_timed_sync_leaves_the_clock_at_its_end(impl):
    """torch_hooks._waiting reads a walked sync's wait as p.t - t0 after synced(t0, None, True): the
    clock is at the sync's end (its span's t1) in both implementations."""
    from time import monotonic_ns

    m, w, p = clock(impl, walks=1)
    t0 = monotonic_ns()
    p.restart(t0 - 10)
    p.enter(SYNC, t0)
    weight = p.synced(t0, None, True)
    assert weight == 1 and p.t == p.sync_spans[-1][1] and p.t >= t0 and p.top == 0


def test_a_sites_wait_goes_out_as_an_int64_whatever_it_was_given():
    """SITE t0 is the ring's int64: a wait given as a float (Probe.synced's caller's times), or one
    past int64 once weighted, goes out as an int (a float or an overflow would disable the writer)."""
    from tuimon.channel import ring
    from tuimon.probe import anatomy

    m = mmap.mmap(-1, RING_AT + 1024 * L.RECORD_SIZE)
    w = ring.RingWriter(m, RING_AT, 1024, HEAD_AT, STEPS_AT, BEAT_AT)
    names: dict[str, int] = {}
    a = anatomy.Anatomy(w, lambda n: names.setdefault(n, len(names) + 1))
    a.restart(1000)

    def float_site():
        a.walk(sys._getframe(), 3, 2.5e6)

    def huge_site():
        a.walk(sys._getframe(), 4, 2**62)

    def no_wait_site():
        a.walk(sys._getframe(), 1, -5)  # (a clock that went back: no wait, the call still counted)

    float_site(), huge_site(), no_wait_site()
    a.close_step(1, 1000, 2000, 1)
    sites = {r[3]: (r[6], r[8]) for r in records(m) if r[0] == L.SITE}
    assert w.enabled and len(sites) == 3
    assert sorted(sites.values()) == [(0, 1.0), (7_500_000, 3.0), (2**63 - 1, 4.0)]


@pytest.mark.parametrize("impl", IMPLS)
def test_both_writers_write_a_sites_wait_alike(impl):
    ring_mod, _ = impl
    images = []
    for mod in (ring_py, ring_mod):
        m = mmap.mmap(-1, RING_AT + RECORDS * L.RECORD_SIZE)
        w = mod.RingWriter(m, RING_AT, RECORDS, HEAD_AT, STEPS_AT, BEAT_AT)
        w.emit(L.SITE, 0, 4, 7, 3, 90_000_000, 5_000_000_000, 2.0)
        w.emit(L.SITE, 0, 5, 7, 3, 2**63 - 1, 5_000_000_000, 1.0)
        assert w.enabled and records(m)[0] == (L.SITE, 0, 0, 4, 7, 3, 90_000_000, 5_000_000_000, 2.0, 0)
        images.append(bytes(m))
    assert images[0] == images[1]


def test_the_waiting_wrapper_gives_a_walked_sync_its_own_wait():
    """torch_hooks._waiting (every .item(), .cpu(), synchronize() of the loop): the walked sync's
    wait, from synced's own clock, is what the site's SITE t0 carries (the first sync of a fresh
    clock is always walked, standing for itself)."""
    import time
    from types import SimpleNamespace

    from tuimon.channel import ring
    from tuimon.probe import anatomy, torch_hooks

    m = mmap.mmap(-1, RING_AT + 1024 * L.RECORD_SIZE)
    w = ring.RingWriter(m, RING_AT, 1024, HEAD_AT, STEPS_AT, BEAT_AT)
    names: dict[str, int] = {}
    a = anatomy.Anatomy(w, lambda n: names.setdefault(n, len(names) + 1))
    t0 = time.monotonic_ns()
    a.restart(t0)
    line = sys._getframe().f_lineno + 1  # (the site: the next line)
    torch_hooks._waiting(SimpleNamespace(anatomy=a, gpu=None), time.sleep, 0.02)
    t1 = time.monotonic_ns()
    a.close_step(1, t0, t1, 1)
    (site,) = [r for r in records(m) if r[0] == L.SITE]
    assert site[8] == 1.0 and 20_000_000 <= site[6] <= t1 - t0, site
    assert {v: k for k, v in names.items()}[site[3]] == f"{anatomy.short_path(__file__)}:{line}"
