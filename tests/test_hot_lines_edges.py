"""analysis/anatomy.py's hot lines and op counts at their edges: hows 0..2 and positive samples
only (a damaged channel's record left out), phase ids outside the names said as numbers, the ops of
the last counted step only."""

from tuimon.analysis.anatomy import hot_lines, op_counts

NAMES = {1: "a.py:1", 2: "a.py:2"}.get
PHASES = ("other", "data")


def test_only_hows_0_to_2_with_samples_count():
    records = [(0, 0, 1, 0, 3.0), (0, 0, 1, 2, 1.0), (0, 0, 1, 3, 50.0), (0, 0, 1, -1, 50.0), (0, 0, 2, 1, 0.0),
               (0, 0, 2, 1, -4.0)]
    rows, total = hot_lines(records, NAMES, PHASES)
    assert total == 4 and [(r.line, r.samples, r.python, r.native, r.waiting) for r in rows] == [("a.py:1", 4, 0.75, 0.0, 0.25)]
    assert hot_lines([], NAMES, PHASES) == ([], 0)


def test_a_phase_id_outside_the_names_is_said_as_a_number():
    rows, _ = hot_lines([(0, 1, 1, 0, 1.0), (0, 2, 2, 1, 1.0), (0, -1, 2, 1, 1.0)], NAMES, PHASES)
    assert sorted(r.phase for r in rows) == ["data", "phase -1", "phase 2"]


def test_the_ops_of_the_last_counted_step_only():
    names = {1: "ops.count", 2: "ops.phase.forward", 3: "ops.line:a.py:1", 4: "ops.phase.other"}.get
    got = op_counts({1: 10.0, 2: 6.0, 3: 4.0, 4: 9.0}, {1: 7, 2: 7, 3: 7, 4: 6}, names)
    assert (got.step, got.total, got.by_phase, got.lines) == (7, 10, {"forward": 6}, {"a.py:1": 4})
    assert op_counts({2: 6.0}, {2: 7}, names) is None
