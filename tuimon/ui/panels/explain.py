"""The e screen's text: every rule of the diagnosis, its checks and thresholds."""

from __future__ import annotations

from rich.text import Text

from ...analysis.verdicts import Verdict
from ...channel.text import safe_text
from ..style import VERDICT_STYLE


def explain(v: Verdict, width: int) -> Text:
    """Every rule of the diagnosis, in the order they are tried: its checks (value, threshold,
    result, where the threshold comes from) and why it fired or not. The first that fires decides."""
    out = Text()
    out.append(f" {v.headline.upper()} ", VERDICT_STYLE.get(v.code, "bold") + " reverse")
    out.append(f"  {v.confidence} confidence\n", "dim")
    out.append(safe_text(v.evidence, 400) + "\n")
    out.append("→ ", "bold")
    out.append(safe_text(v.next_step, 600) + "\n\n")
    out.append("The rules, in the order they are tried (the first that fires decides):\n", "bold")
    decided = False
    for rule in v.rules:
        mark, style = ("✓", "bold green") if rule.fired else ("·", "dim")
        if rule.fired and not decided:
            mark, decided = "▶", True
        out.append(f"\n{mark} {rule.title}", style)
        out.append(f" — {safe_text(rule.why, 300)}\n")
        for ch in rule.checks:
            res = {True: "yes", False: "no", None: "n/a"}[ch.passed]
            out.append(f"    {ch.what}: {ch.value} {ch.test}".rstrip() + f"  → {res}\n",
                       "" if ch.passed else "dim")
            if ch.source:
                out.append(f"      {safe_text(ch.source, 500)}\n", "dim")
    return out
