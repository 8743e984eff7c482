"""What the loop is doing now."""

from __future__ import annotations

from rich.text import Text

from ...monitor.state import View
from ..format import fit, seconds


def now_line(view: View, width: int = 0) -> Text:
    """What the loop is doing now: the step in progress, its open phase and for how long, and
    where the loop thread is. Empty without a live channel."""
    t = view.training
    if t is None or t.state != "alive" or t.now is None:
        return Text()
    n = t.now
    out = Text("now ", "bold")
    long = (n.step_s or 0) >= 1 or n.phase_s >= 1
    if not long:  # a fast loop: phases come and go within a sample; its steps say it moves
        out.append(f"step {max(n.step, t.steps + 1):,} in progress", "dim")
        if t.step_time_ms:
            out.append(f" · a step ends every {t.step_time_ms.mean:,.1f} ms", "dim")
        return out
    out.append(f"step {n.step:,}: ")
    out.append(f"{n.phase} for {seconds(n.phase_s)}", "bold")
    if n.step_s is not None and n.step_s - n.phase_s >= 0.05:
        out.append(f" (the step began {seconds(n.step_s)} ago)")
    elif n.step_s is None:
        out.append(" (no step has ended yet)")
    where = f" at {n.where}" if n.where else ""
    if n.waiting_in:
        where += f", in {n.waiting_in}"
    room = max(10, (width or 10**6) - len(out.plain))
    if where and n.context:  # a library's line: the job's own line that led there, kept whole where the rest is cut
        tail = fit(f" · from {n.context}", max(room // 2, 1))
        out.append(fit(where, max(room - len(tail), 1)), "dim")
        out.append(tail, "dim")
    elif where:
        out.append(fit(where, room), "dim")
    return out
