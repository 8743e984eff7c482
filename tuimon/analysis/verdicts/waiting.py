"""waiting: not enough data yet (too few steps in the window), or no channel at all."""

from __future__ import annotations

from .. import thresholds as T
from .base import Context, Rule, Verdict, VerdictClass, at_least


def rule(c: Context) -> Rule:
    e, steps = c.e, c.e.window.steps
    check = at_least("steps in the window", steps, T.MIN_STEPS, lambda v: f"{v}")
    title = "Not enough data"
    if not e.has_channel:
        if e.outside.sampled:
            return Rule(code="waiting", title=title, fired=False, checks=[check],
                        why="no channel: judged from outside (next rule)")
        return Rule(code="waiting", title=title, fired=True, checks=[check],
                    why="no channel: the loop's own timings need the probe")
    fired = steps < T.MIN_STEPS.value or e.window.data_share is None
    return Rule(code="waiting", title=title, fired=fired, checks=[check],
                why=f"{steps} step{'s' if steps != 1 else ''} seen" if fired else "enough steps")


def verdict(c: Context, rules: list[Rule]) -> Verdict:
    e, steps = c.e, c.e.window.steps
    if not e.has_channel:
        return Verdict(code="waiting", headline="no loop timings", evidence="this process has no tuimon channel",
                       next_step="restart it with `tuimon run -- <command>` (or call tuimon.instrument()) for its steps",
                       confidence="low", rules=rules)
    return Verdict(code="waiting", headline="not enough data yet",
                   evidence=f"{steps} step{'s' if steps != 1 else ''} seen; a verdict needs {T.MIN_STEPS.value:g}",
                   next_step="wait for a few steps (a step is the loop's optimizer.step(), else its backward(), its "
                             "model call or its DataLoader's next(); tuimon.step() marks one by hand)",
                   confidence="low", rules=rules)


CLASS = VerdictClass(rule=rule, verdict=verdict)
