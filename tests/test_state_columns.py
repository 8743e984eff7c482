"""The main screen's sparkline columns (monitor/state.py): one per COLUMN_S of absolute time, each
the mean of what its cycles brought (step times, GPU fields), time without samples an empty column;
and the state holds means, not every value (a 10 ms-step job brings ~500 step times a column)."""

import tracemalloc

from tuimon.model import Cycle, GpuSample, TrainingSnapshot
from tuimon.monitor.state import COLUMN_S, COLUMNS, MonitorState

S = 1_000_000_000


def cycles(seconds: int, steps_per_s: int, gap: tuple[int, int] = (0, 0)):
    """A cycle a second: steps_per_s new steps, step k of the job taking 10 + k % 7 ms; GPU 0's SM
    activity the second's number; no cycle in the gap (seconds)."""
    done = 0
    for s in range(seconds):
        if gap[0] <= s < gap[1]:
            continue
        done += steps_per_s
        recent = [10.0 + k % 7 for k in range(done - min(steps_per_s, 120) + 1, done + 1)]
        yield s, recent, Cycle(t=s * S, gpus=[GpuSample(index=0, t=s * S, sm_active=float(s))],
                               training=TrainingSnapshot(pid=1, steps=done, recent_step_ms=recent))


def test_each_column_is_the_mean_of_its_seconds_and_a_gap_is_empty():
    state, by_column = MonitorState(), {}
    for s, recent, c in cycles(30, 4, gap=(10, 20)):
        state.apply(c)
        col = s // COLUMN_S
        by_column.setdefault(col, ([], []))[0].extend(recent)
        by_column[col][1].append(float(s))
    v = state.view()
    assert v.step_columns[:2] == [sum(x) / len(x) for x in (by_column[0][0], by_column[1][0])]
    assert v.step_columns[2:4] == [None, None]  # (seconds 10..19: no cycle)
    assert v.step_columns[4:] == [sum(by_column[k][0]) / len(by_column[k][0]) for k in (4, 5)]
    sm = v.gpus[0].columns["sm_active"]
    assert sm == [sum(by_column[0][1]) / 5, sum(by_column[1][1]) / 5, None, None, 22.0, 27.0]


def test_the_columns_hold_means_not_every_value():
    """An hour of a 10 ms-step job (120 step times a cycle, what a snapshot carries): the state's
    memory after it is what its fixed-length histories hold (with every value kept, COLUMNS
    columns of 600 step times and 5 samples of each GPU field were ~5 MB)."""
    state = MonitorState()
    tracemalloc.start()
    try:
        for _, _, c in cycles(3600, 100):
            state.apply(c)
        del c
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(state.view().step_columns) == COLUMNS
    assert held < 1.5 * 2**20, f"{held / 2**20:.1f} MB"


def test_a_view_has_every_column_as_read_from_the_columns_themselves():
    """The finished columns' series (kept as columns finish) against every column's means read
    again (as the view did before): through gaps, the COLUMNS limit, a second GPU that appears late
    and a first that goes, at every cycle; and the verdict's window means, which stop at the first
    sample older than the window, against all samples filtered."""
    import random

    from tuimon.monitor import evidence

    rnd, state, done = random.Random(6), MonitorState(history=90), 0
    t = 0
    for k in range(1500):
        t += rnd.choice([S, S, S, 2 * S, 7 * S]) if k % 300 else 400 * S  # (and a gap longer than COLUMNS)
        done += rnd.randint(0, 5)
        gpus = []
        if k < 1200:
            gpus.append(GpuSample(index=0, t=t, sm_active=rnd.choice([None, rnd.random() * 100]), power_w=80.0))
        if k > 200:
            gpus.append(GpuSample(index=1, t=t, sm_active=rnd.random() * 100))
        recent = [rnd.random() * 50 for _ in range(min(done, 10))]
        state.apply(Cycle(t=t, gpus=gpus, training=TrainingSnapshot(pid=1, steps=done, recent_step_ms=recent)))
        if k % 7 and k < 1490:
            continue
        v = state.view()
        cols = state._columns
        assert v.step_columns == [c.step_ms.value for c in cols]
        assert v.gpu_step_columns == [c.gpu_step_ms.value for c in cols]
        for g in v.gpus:
            i = g.latest.index
            assert g.columns == {f: [c.gpu[i][f].value if i in c.gpu else None for c in cols] for f in g.columns}
            span = evidence.window_span_s(state.training) * 1e9
            hist = state._gpu_hist[i]
            for f in ("sm_active", "power_w"):
                since = hist["t"][-1] - span
                vals = [x for tt, x in zip(reversed(hist["t"]), reversed(hist[f]), strict=True)
                        if tt is not None and tt >= since and x is not None]
                assert state._window_mean(i, f, span) == (sum(vals) / len(vals) if vals else None)
