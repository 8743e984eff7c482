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
