"""analysis/ranks.py on hand-made rows at its edges: a rank is measured from 5 steps in its window
(MIN_STEPS, written out), the straggler's slower phases are those strictly beyond the others'
median (comm left out), and the job's comm share is the measured ranks' mean."""

from dataclasses import replace

from tuimon.analysis.ranks import comm_share, straggler
from tuimon.model import RankRow


def row(rank: int, step_ms: float, window: int = 50, comm_ms: float = 0.0, **kw) -> RankRow:
    return RankRow(rank=rank, pid=100 + rank, window_steps=window, step_mean_ms=step_ms, comm_ms=comm_ms, **kw)


def test_a_rank_counts_from_5_steps_in_its_window():
    assert straggler([row(0, 10.0, window=5), row(1, 20.0, window=5)]) is not None
    assert straggler([row(0, 10.0, window=4), row(1, 20.0, window=5)]) is None
    assert comm_share([row(0, 10.0, window=4, comm_share=0.5), row(1, 10.0, comm_share=0.1)]) == 0.1
    assert comm_share([row(0, 10.0, comm_share=0.5), row(1, 10.0, comm_share=0.1)]) == 0.3
    assert comm_share([row(0, 10.0)]) is None


def test_the_straggler_and_the_phases_it_is_slower_in():
    slow = row(1, 30.0, phases={"forward": 12.0, "backward": 10.0, "data": 2.0, "comm": 9.0})
    fast = row(0, 30.0, comm_ms=15.0, phases={"forward": 6.0, "backward": 10.0, "data": 2.0, "comm": 1.0})
    s = straggler([fast, slow])
    assert (s.rank, s.pid, s.own_ms, s.others_ms, s.ratio) == (1, 101, 30.0, 15.0, 2.0)
    assert s.slower == {"forward": 6.0}  # backward and data the same: not slower; comm: the wait itself
    assert s.others_measured_ms == 15.0


def test_no_straggler_from_ranks_that_do_nothing():
    assert straggler([row(0, 0.0), row(1, 0.0)]) is None
    assert straggler([row(0, 10.0)]) is None


def test_when_the_wait_takes_all_the_others_measure_their_measure_stands():
    """The others' backward 10 ms longer than the straggler's (DDP's timer, on GPUs) is all they measure
    (10 ms): that bound reaches 0, so what they measure is the reference (never a ratio over 0)."""
    slow = row(1, 30.0, gpu=1, ddp_backward_ms=5.0)
    fast = row(0, 30.0, comm_ms=20.0, gpu=0, ddp_backward_ms=15.0)  # own: 30 - 20 = 10 ms
    s = straggler([fast, slow])
    assert s is not None and (s.rank, s.others_ms, s.ratio) == (1, 10.0, 3.0)
    # with a little host work of their own, still what they measure: the floor is for a measure of 0
    s = straggler([replace(fast, phases={"data": 0.5}), slow])
    assert (s.others_ms, s.ratio) == (10.0, 3.0)
    s = straggler([replace(fast, comm_ms=30.0, phases={"data": 0.5}), slow])  # they measure 0: the floor
    assert (s.others_ms, s.others_measured_ms, s.ratio) == (0.5, 0.0, 60.0)
