"""host-bound's branches at their edges, with the published values written out: a line's time per
op it issues at most 25 us (OP_HOST_MAX_US) counts as launches; ops at 5 us each (OP_HOST_US)
filling half the time outside the model are launches; the loop thread under 90% of a core waits
elsewhere; a moderate wait under 20% yields to a part 4x larger, a high one never."""

from tests.helpers.flat_evidence import flat_evidence as Evidence
from tuimon.analysis.verdicts import diagnose
from tuimon.model import HotLine, OpCounts

LINE = "train.py:41 in step `y = y * w + b`"
BASE = dict(steps=50, step_ms=40.0, data_share=0.01, sync_share=0.0, sync_per_step=0.0, gpm=True, sm_active=10.0,
            tensor_active=5.0, dram_bw=10.0, fp32_active=2.0, fp16_active=1.0, loop_cpu=99.0)


def headline(**kw) -> str:
    return diagnose(Evidence(**{**BASE, **kw})).headline


def hot(share: float, python: float = 1.0, native: float = 0.0, waiting: float = 0.0, line: str = LINE) -> list[HotLine]:
    return [HotLine(phase="other", line=line, samples=100, share=share, phase_share=share, python=python,
                    native=native, waiting=waiting)]


def test_a_line_at_25_us_an_op_is_launches_and_past_it_is_not():
    ops = OpCounts(step=9, total=1010, by_phase={"other": 1000, "forward": 10}, lines={LINE: 1000})
    phases = {"forward": 0.05, "other": 0.95}
    # 0.625 of a 40 ms step over 1,000 ops: 25 us each
    assert headline(phases=phases, ops=ops, hot=hot(0.625)) == "host-bound: launches outside the model"
    assert headline(phases=phases, ops=ops, hot=hot(0.6253)) == "host-bound: Python outside the model"


def test_the_lines_issuing_ops_must_hold_half_the_time_outside_the_model():
    ops = OpCounts(step=9, total=1010, by_phase={"other": 1000, "forward": 10}, lines={LINE: 1000})
    phases = {"forward": 0.2, "other": 0.8}
    assert headline(phases=phases, ops=ops, hot=hot(0.4)) == "host-bound: launches outside the model"
    assert headline(phases=phases, ops=ops, hot=hot(0.3999)) == "host-bound: Python outside the model"


def test_ops_at_5_us_each_filling_half_the_time_are_launches():
    phases = {"forward": 0.1, "other": 0.5, "backward": 0.1}  # other: 20 ms of the 40 ms step; half of it 10 ms
    ops = OpCounts(step=9, total=2010, by_phase={"other": 2000, "forward": 10})
    assert headline(phases=phases, ops=ops) == "host-bound: launches outside the model"
    ops = OpCounts(step=9, total=2009, by_phase={"other": 1999, "forward": 10})
    assert headline(phases=phases, ops=ops) == "host-bound: Python outside the model"


def test_a_thread_half_in_native_calls_is_launches():
    ops = OpCounts(step=9, total=20, by_phase={"other": 10, "forward": 10})
    phases = {"forward": 0.05, "other": 0.95}
    elsewhere = "train.py:9 in f `x.cpu()`"  # (a line the op counter did not count at)
    assert headline(phases=phases, ops=ops, hot=hot(0.5, 0.5, 0.5, line=elsewhere)) == \
        "host-bound: launches outside the model"
    assert headline(phases=phases, ops=ops, hot=hot(0.5, 0.51, 0.49, line=elsewhere)) == \
        "host-bound: Python outside the model"


def test_outside_the_model_the_loop_thread_under_90_percent_waits_elsewhere():
    phases = {"forward": 0.05, "other": 0.95}
    assert headline(phases=phases, loop_cpu=90.0) == "host-bound: Python outside the model"
    assert headline(phases=phases, loop_cpu=89.9) == "host-bound: the loop waits elsewhere"
    assert headline(phases=phases, loop_cpu=None) == "host-bound: outside the model"
    # equal parts: the model's (not outside it)
    assert headline(phases={"forward": 0.5, "other": 0.5}) == "host-bound: launches and Python in the model"
    assert headline(phases={"forward": 0.4999, "other": 0.5001}) == "host-bound: Python outside the model"


def test_the_words_outside_the_model_follow_the_hot_line():
    phases = {"forward": 0.05, "other": 0.95}
    blocked = diagnose(Evidence(**{**BASE, "loop_cpu": 20.0}, phases=phases, hot=hot(0.9, 0.0, 0.0, 0.5)))
    assert f"it is blocked at {LINE} (50% of that line's samples" in blocked.next_step
    # the top line under half blocked, the phase's samples over half (another line of it blocked throughout:
    # the loop waits elsewhere, LOOP_BLOCKED_SAMPLES), so where is not that line
    other_line = HotLine(phase="other", line="train.py:50 in wait", samples=100, share=0.05, phase_share=0.05,
                         python=0.0, native=0.0, waiting=1.0)
    assert "it is blocked on something tuimon does not see" in diagnose(
        Evidence(**{**BASE, "loop_cpu": 20.0}, phases=phases, hot=hot(0.9, 0.51, 0.0, 0.49) + [other_line])).next_step
    native = diagnose(Evidence(**BASE, phases=phases, hot=hot(0.9, 0.5, 0.5))).next_step
    assert "in a native call (50% of its samples" in native
    assert "in a native call" not in diagnose(Evidence(**BASE, phases=phases, hot=hot(0.9, 0.51, 0.49))).next_step
    busy = diagnose(Evidence(**{**BASE, "loop_cpu": 60.0, "loop_cpu_wait": 30.0}, phases=phases)).next_step
    assert "the loop thread waited for a core 30% of the time" in busy
    assert "waited for a core" not in diagnose(Evidence(**{**BASE, "loop_cpu": 90.0}, phases=phases)).next_step


def test_a_moderate_wait_yields_to_a_part_4x_larger_a_high_one_never():
    model = {"forward": 0.4, "backward": 0.4}  # 80%: 4x a 20% wait
    assert headline(phases=model, data_share=0.1999) == "host-bound: launches and Python in the model"
    assert headline(phases=model, data_share=0.20) == "input-bound"
    assert headline(phases={"forward": 0.3, "backward": 0.3}, sync_share=0.15) == \
        "host-bound: launches and Python in the model"  # 60%: 4x 15% outranks it
    assert headline(phases={"forward": 0.3, "backward": 0.3}, sync_share=0.1501) == "sync-bound"


def test_outside_the_model_a_wait_for_a_core_counts_from_half_a_percent():
    phases = {"forward": 0.05, "other": 0.95}
    assert headline(phases=phases, loop_cpu=89.6, loop_cpu_wait=0.5) == "host-bound: Python outside the model"
    assert headline(phases=phases, loop_cpu=89.6, loop_cpu_wait=0.49) == "host-bound: the loop waits elsewhere"


def test_without_a_step_time_ops_explain_nothing():
    ops = OpCounts(step=9, total=20, by_phase={"other": 10, "forward": 10})
    assert headline(phases={"forward": 0.05, "other": 0.95}, ops=ops, step_ms=None) == \
        "host-bound: Python outside the model"


def test_the_host_rule_never_lets_a_high_wait_be_outranked():
    def host_rule(data: float):
        v = diagnose(Evidence(**{**BASE, "data_share": data}, phases={"forward": 0.45, "backward": 0.45}))
        [rule] = [r for r in v.rules if r.code == "host-bound"]
        return rule.fired
    assert host_rule(0.1999) is True and host_rule(0.20) is False
