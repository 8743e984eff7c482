"""The CUDA-event arithmetic of tuimon/probe/gpu_timing.py against a simulated GPU queue (CI has
no GPU: the fake stands at the CUDA boundary only; the same code runs on the GPU machine in
tests/gpu/check_diagnosis.py)."""

from types import SimpleNamespace

import pytest

from tuimon.channel import layout as L
from tuimon.probe import gpu_timing

MS = 1_000_000


class Sim:
    """A host clock and one in-order GPU stream: work enqueued at host time t starts when the GPU
    is free and the host has enqueued it."""

    def __init__(self):
        self.now = 10 * MS
        self.free_at = 0
        self.records = []

    def enqueue(self, work_ms: float, host_ms: float = 0.0):
        """The host spends host_ms enqueueing work_ms of GPU work."""
        self.free_at = max(self.free_at, self.now) + int(work_ms * MS)
        self.now += int(host_ms * MS)

    def host(self, ms: float):
        self.now += int(ms * MS)

    def sync(self):
        """The host waits until the GPU is done; returns (t0, t1)."""
        t0 = self.now
        self.now = max(self.now, self.free_at)
        return t0, self.now


class FakeEvent:
    def __init__(self, sim):
        self.sim, self.done_at = sim, None

    def record(self, stream=None):
        self.done_at = max(self.sim.now, self.sim.free_at)  # completes when the work before it is done

    def query(self):
        return self.sim.now >= self.done_at

    def elapsed_time(self, other):
        return (other.done_at - self.done_at) / MS


@pytest.fixture
def sim(monkeypatch):
    s = Sim()
    monkeypatch.setattr(gpu_timing, "_now", lambda: s.now)
    return s


@pytest.fixture
def every_step(monkeypatch):
    """The event arithmetic on every step (as for steps from gpu_timing.MIN_STEP_NS up)."""
    monkeypatch.setattr(gpu_timing, "MIN_STEP_NS", MS)


def timing(sim):
    cuda = SimpleNamespace(is_initialized=lambda: True, Event=lambda enable_timing: FakeEvent(sim),
                           current_stream=lambda: None, current_device=lambda: 0)
    records = []
    names = {}
    t = gpu_timing.GpuTiming(SimpleNamespace(cuda=cuda), lambda *r: records.append(r),
                             lambda n: names.setdefault(n, len(names) + 1), lambda: 1)
    by_name = {v: k for k, v in names.items()}

    def values():
        out = {}
        for r in records:
            assert r[0] == L.STEP_VALUE
            out.setdefault(r[4], {})[by_name.get(r[2]) or {v: k for k, v in names.items()}[r[2]]] = r[7]
        return out

    return t, values


def steps(sim, t, n, body):
    for k in range(1, n + 1):
        t0 = sim.now
        syncs = body(k) or []
        if k >= t.due:  # (as the probe calls it: from the step it is due on)
            t.boundary(k, t0, sim.now, syncs)


def test_a_gpu_bound_loop_that_syncs_each_step(sim, every_step):
    """5 ms to enqueue 25 ms of GPU work, then .item(): the host waits 20 ms; the GPU is busy the
    whole step. Busy is a lower bound: at least the sync's 20 ms of the 25."""
    t, values = timing(sim)

    def body(k):
        sim.enqueue(25, host_ms=5)
        span = sim.sync()
        t.after_sync()
        return [span]

    steps(sim, t, 20, body)
    v = values()
    assert len(v) >= 15
    for step in list(v)[3:]:
        assert v[step]["gpu.lag_ns"] == 0  # it synced: nothing queued at the end
        assert 0.8 * 25 * MS <= v[step]["gpu.busy_ns"] <= 25 * MS
        assert v[step]["gpu.step_ns"] == pytest.approx(25 * MS, rel=0.01)


def test_a_host_bound_loop_shows_an_idle_gpu(sim, every_step):
    """10 ms of host work, 1 ms of GPU work: the GPU has nothing queued at each boundary."""
    t, values = timing(sim)
    steps(sim, t, 20, lambda k: (sim.enqueue(1), sim.host(10)) and None)
    v = values()
    for step in list(v)[3:]:
        assert v[step]["gpu.lag_ns"] == 0 and v[step]["gpu.busy_ns"] < 0.15 * 11 * MS


def test_a_host_running_ahead_of_a_busy_gpu(sim, every_step):
    """20 ms steps enqueueing 30 ms of GPU work each and never waiting: the lag grows by 10 ms a
    step, the GPU side of a step is its 30 ms of work, and the GPU is busy the whole step (seen
    from the mark at the end of forward: the boundary events alone see only the older work)."""
    t, values = timing(sim)
    steps(sim, t, 12, lambda k: (sim.enqueue(30, host_ms=2), t.mark(), sim.host(18)) and None)  # mark: end of forward
    sim.now += 1000 * MS  # let the GPU finish, then fold the events in
    t.resolve()
    v = values()
    lags = [v[s]["gpu.lag_ns"] for s in sorted(v)]
    assert len(lags) >= 10 and lags == sorted(lags) and lags[-1] - lags[-2] == pytest.approx(10 * MS, rel=0.01)
    for step in sorted(v)[2:]:
        assert v[step]["gpu.step_ns"] == pytest.approx(30 * MS, rel=0.01)
        assert v[step]["gpu.busy_ns"] == pytest.approx(20 * MS, rel=0.01)  # the whole 20 ms host step


def test_short_steps_are_sampled_and_pending_events_never_wait(sim):
    t, values = timing(sim)
    steps(sim, t, 200, lambda k: sim.enqueue(0.2, host_ms=2) and None)  # 2 ms steps
    assert t.every == 80  # events on every 80th step (gpu_timing.MIN_STEP_NS: 160 ms)
    v = values()  # (a measured step's values come at the next call after its events completed: step 80's at 159)
    assert 1 <= len(v) <= 3 and all(s % 80 == 0 for s in v if s > 2)  # (the first steps ran before the stride)
    assert 80 in v and t.due == 239  # the step before the next measured one (240)


def test_comm_event_pairs_are_sampled_on_short_steps(sim):
    """CommTiming (probe/comm.py) on the same simulated stream: a 1 ms collective in every ~4 ms
    step gets its event pair on the steps GpuTiming measures (every n-th: about one per 160 ms), each
    read as 1 ms of GPU time; without a GpuTiming, none."""
    from tuimon.probe import comm

    cuda = SimpleNamespace(is_initialized=lambda: True, Event=lambda enable_timing: FakeEvent(sim),
                           current_stream=lambda: None, current_device=lambda: 0)
    torch = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: True, **vars(cuda)))
    records, names = [], {}
    c = comm.CommTiming(torch, lambda *r: records.append(r), lambda n: names.setdefault(n, len(names) + 1), lambda: 1)
    assert c.event() is None  # no GpuTiming: no event pairs
    c.gpu = gpu_timing.GpuTiming(torch, lambda *r: None, lambda n: 0, lambda: 1)
    pairs = 0
    for step in range(1, 321):
        t0 = sim.now
        sim.host(2)
        start = c.event()
        sim.enqueue(1.0, host_ms=0.1)  # the collective's kernel; the stream waits for it
        c.add_pair(step, start, c.event())
        pairs += start is not None
        c.count(4096)
        sim.host(2)
        sim.sync()
        c.close(step, sim.now, 1)
        if step >= c.gpu.due:
            c.gpu.boundary(step, t0, sim.now, [])
    gpu = [r[7] for r in records if r[2] == names["comm.gpu_ns"]]
    assert c.gpu.every == gpu_timing.stride(c.gpu._step_ns) >= 16
    assert abs(pairs - 320 / c.gpu.every) <= 2 and len(gpu) == pairs  # every n-th step of 320, each resolved
    assert all(abs(v - 1.0 * MS) < 0.01 * MS for v in gpu)
    assert sum(1 for r in records if r[2] == names["comm.calls"]) == 320  # (the host side: every step)


def test_the_step_time_called_on_fewer_steps_is_the_mean_called_on_every_step():
    """smoothed(): GPU timing and the op counter are called on the steps they need only; their step
    time must follow the steps as a running mean over every step would (a first step of 5 s forgotten
    as fast), so the stride and the count's cost are judged as before."""
    from tuimon.probe.ops import smoothed

    times = [5000 * MS] + [10 * MS] * 99  # a first step with the job's setup in it, then 10 ms steps
    every = None
    t = 0
    for k, d in enumerate(times, start=1):
        t0, t = t, t + d
        every = smoothed(every, (k - 1, t0) if k > 1 else None, k, t0, t)
    few, last = None, None
    t = 0
    for k, d in enumerate(times, start=1):
        t0, t = t, t + d
        if k in (1, 20, 40, 60, 80, 100):  # called on 6 steps of 100
            few, last = smoothed(few, last, k, t0, t), (k, t)
    assert every == pytest.approx(few, rel=0.02) and few == pytest.approx(10 * MS, rel=0.02)
    assert smoothed(None, None, 1, 0, 7) == 7.0
