"""mixed: no single bottleneck: no rule fired (SM 50-80%, no wait large enough): a capture (c) is
the next look. Not a row of the table: what diagnose() says when none fires."""

from __future__ import annotations

from .base import Context, Rule, Verdict, largest_part, share


def verdict(c: Context, rules: list[Rule]) -> Verdict:
    e = c.e
    name, largest = largest_part(e, "data")
    return Verdict(code="mixed", headline="no single bottleneck",
                   evidence=f"{c.gpu_words()} · data wait {share(e.window.data_share)} · syncs {share(e.sync.share)}"
                            + (f" · {name} {share(largest)}" if largest else ""),
                   next_step="no rule fired: c captures a window to see the top kernels and operators",
                   confidence="low", rules=rules)
