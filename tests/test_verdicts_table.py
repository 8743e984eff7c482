"""The verdicts' table (tuimon/analysis/verdicts/): one row per rule, in the vocabulary's order,
each row's rule naming its own code; and a new class is one module plus one row."""

import types
from collections.abc import Mapping

from tuimon.analysis import verdicts
from tuimon.analysis.verdicts import (
    VERDICTS,
    Check,
    Context,
    Evidence,
    Rule,
    Verdict,
    VerdictClass,
    WindowEvidence,
    diagnose,
)
from tuimon.model import vocab


def test_the_table_holds_every_rule_once_in_the_vocabularys_order():
    assert list(VERDICTS) == list(vocab.RULE_CODES)
    assert isinstance(VERDICTS, Mapping) and not hasattr(VERDICTS, "__setitem__")
    c = Context(Evidence())
    for code, row in VERDICTS.items():
        assert row.rule(c).code == code


def test_a_new_class_is_one_module_and_one_row(monkeypatch):
    """A stand-in for verdicts/<name>.py (its rule and its words side by side), and its row put
    before the last: diagnose tries it in that place, and every rule is still shown."""
    late = types.ModuleType("late")

    def rule(c: Context) -> Rule:
        late_steps = c.e.window.steps >= 1000
        check = Check(what="steps", value=str(c.e.window.steps), test=">= 1000", passed=late_steps)
        return Rule(code="late", title="Late in the run", fired=late_steps, checks=[check], why="a long run")

    def verdict(c: Context, rules: list[Rule]) -> Verdict:
        return Verdict(code="healthy", headline="late: the run is long", evidence="steps", next_step="none",
                       confidence="low", rules=rules)

    late.CLASS = VerdictClass(rule=rule, verdict=verdict)
    rows = list(VERDICTS.items())
    monkeypatch.setattr(verdicts, "VERDICTS", dict([*rows[:-1], ("late", late.CLASS), rows[-1]]))
    v = diagnose(Evidence(window=WindowEvidence(steps=5000, data_share=0.0)))
    assert v.headline == "late: the run is long"
    assert [r.code for r in v.rules] == [*vocab.RULE_CODES[:-1], "late", vocab.RULE_CODES[-1]]
    assert diagnose(Evidence(window=WindowEvidence(steps=50, data_share=0.0))).headline != v.headline
