"""One vocabulary per concept (tuimon/model/vocab.py): what the channel numbers, what the diagnosis
names and what every mapping from a name covers are the same names."""

import ast

import pytest

from tests.conftest import ROOT
from tuimon.channel import control, layout
from tuimon.model import vocab


def test_the_channel_numbers_the_same_phases_step_sources_and_capture_states():
    assert sorted(layout.PHASES) == sorted(vocab.PHASES)
    assert layout.STEP_SOURCES == ("none", *vocab.STEP_SOURCES)  # (the wire's 0: no source yet)
    assert sorted(control.STATE_NAMES.values()) == sorted(vocab.CAPTURE_STATES)
    assert layout.HOT_CONTEXT == vocab.HOT_CONTEXT


def test_the_diagnosis_tries_its_rules_in_the_vocabularys_order():
    from tuimon.analysis.verdicts import Evidence, diagnose

    v = diagnose(Evidence())
    assert [r.code for r in v.rules] == list(vocab.RULE_CODES)
    assert v.code in vocab.VERDICT_CODES and v.confidence in vocab.CONFIDENCES


def test_every_verdict_and_rule_the_diagnosis_can_make_is_named_in_the_vocabulary():
    """Read from the source: each Verdict(code=...) and Rule(code=...) made with a literal name."""
    made = {"Verdict": set(), "Rule": set()}
    for path in sorted((ROOT / "tuimon" / "analysis" / "verdicts").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in made:
                code = next((k.value for k in node.keywords if k.arg == "code"), None)
                if isinstance(code, ast.Constant) and isinstance(code.value, str):
                    made[node.func.id].add(code.value)
    assert made["Verdict"] and made["Verdict"] <= set(vocab.VERDICT_CODES), made["Verdict"] - set(vocab.VERDICT_CODES)
    assert made["Rule"] and made["Rule"] <= set(vocab.RULE_CODES), made["Rule"] - set(vocab.RULE_CODES)


def test_a_straggler_gets_advice_for_every_phase_it_can_be_slower_in():
    """Its slower phases are its own work: every phase but comm (the wait itself, analysis/ranks.py)."""
    from tests.helpers.flat_evidence import flat_evidence as Evidence
    from tuimon.analysis.verdicts import diagnose
    from tuimon.analysis.verdicts.straggler import FIX as STRAGGLER_FIX
    from tuimon.model import Straggler

    assert sorted(STRAGGLER_FIX) == sorted(set(vocab.PHASES) - {"comm"})
    s = Straggler(rank=1, pid=812, ratio=1.8, own_ms=36.0, others_ms=20.0, slower={"copy": 14.0, "forward": 2.0})
    v = diagnose(Evidence(steps=50, step_ms=40.0, data_share=0.01, ranks=2, straggler=s, comm_share=0.3))
    assert v.code == "straggler" and v.next_step.startswith("rank 1: its host-to-device copies take longer"), v


def test_every_mapping_of_the_ui_covers_its_vocabulary():
    from tuimon.ui import format as fmt
    from tuimon.ui import style

    for mapping, members in ((style.VERDICT_STYLE, vocab.VERDICT_CODES),
                             (fmt.VERDICT_NAMES, vocab.VERDICT_CODES),
                             (style.COMPARISON_STYLE, vocab.COMPARISON_STATES),
                             (fmt.COMPARISON_BADGE, vocab.COMPARISON_STATES),
                             (fmt.COMPARISON_WORDS, vocab.COMPARISON_STATES),
                             (style.PHASE_STYLE, vocab.PHASES),
                             (fmt.STEP_SOURCE_WORDS, vocab.STEP_SOURCES)):
        assert sorted(mapping) == sorted(members)


@pytest.mark.asyncio
async def test_the_help_names_every_class_of_verdict():
    from tuimon.ui.app import make_app
    from tuimon.ui.format import VERDICT_NAMES

    app = make_app(None, "test")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        shown = " ".join(str(app.screen.query_one("#help").render()).split())
        assert app.screen.query_one("#help").region.height <= 24  # (whole, on the smallest screen)
    for code, name in VERDICT_NAMES.items():
        assert (name in shown) == (code != "waiting"), (code, name)  # (waiting: no verdict yet)
