"""analysis/anatomy.py's Window at its edges: steps of no time give no shares (never a division by
zero), phases in the vocabulary's order and the others after them by name, CUDA busy time only over
steps that took time."""

from tuimon.analysis.anatomy import Window
from tuimon.analysis.steps import StepRecord

NAMES = {1: "forward", 2: "zeta", 3: "data", 4: "sync", 5: "comm", 6: "copy", 7: "alpha", 10: "gpu.busy_ns",
         11: "sync.count", 12: "comm.calls", 13: "copy.h2d_bytes"}.get


def test_steps_of_no_time_give_no_shares():
    still = [StepRecord(index=1, t0=5, t1=5, phases={4: 0.0, 5: 0.0, 6: 0.0}, values={11: 2.0, 12: 1.0, 13: 2.0**20})]
    w = Window(still, NAMES)
    assert w.phases() == [] and w.gpu_times() is None
    assert (w.syncs().share, w.comm().share, w.copies().share) == (0.0, 0.0, 0.0)


def test_phases_in_the_vocabularys_order_then_by_name():
    s = StepRecord(index=1, t0=0, t1=100, phases={2: 10.0, 1: 40.0, 7: 10.0, 3: 40.0})
    assert [(p.name, p.share) for p in Window([s], NAMES).phases()] == \
        [("data", 0.4), ("forward", 0.4), ("alpha", 0.1), ("zeta", 0.1)]


def test_cuda_busy_time_over_steps_that_took_time():
    steps = [StepRecord(index=1, t0=0, t1=100, phases={1: 100.0}, values={10: 50.0}),
             StepRecord(index=2, t0=100, t1=100, phases={1: 0.0}, values={10: 50.0})]
    g = Window(steps, NAMES).gpu_times()
    assert (g.steps, g.busy_share, g.idle_share) == (1, 0.5, 0.5)
    t = Window(steps, NAMES)
    assert (t.syncs().share, t.comm(), t.copies()) == (0.0, None, None)

