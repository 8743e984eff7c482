"""Captures: which one `c` takes, how the current one goes, what the last found."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from ...capture.client import window_steps
from ...capture.cost import BUDGET, describe, expected_pause
from ...channel.text import count, safe_text
from ...model.units import human_bytes
from ...monitor.state import View


@dataclass(frozen=True)
class Refusal:
    """Why `c` took no capture, said on the capture line while the captures stay as they were
    then (a window that ends, or a new one, makes it old news)."""
    message: str
    seq: int
    state: str


def capture_panel(view: View, steps: int, refused: Refusal | None = None) -> Text:
    """Which capture `c` takes, or how the current one is going, and what the last one found."""
    t, c = view.training, view.capture
    out = Text()
    if t is None or c is None:
        why = view.problems.get("capture")
        return Text(safe_text(why) if why else "captures need a live job with the probe (tuimon attach / run)",
                    "red" if why else "dim")
    kind = "kineto" if c.kind == "kineto" else safe_text(t.capture_kind or "torch.profiler", 40)  # (Kineto: chosen at c)
    what = count(steps, "step") if t.steps > 0 else "10 s (no steps seen)"
    if c.busy:
        out.append(f"capture {c.seq} {c.state}" if c.seq else f"capture {c.state}", "bold yellow")
        covered = window_steps(c.state, c.first_step, c.last_step)
        if covered:
            out.append("  " + covered)
        out.append("  " + safe_text(c.message, 80), "dim")
        if c.state == "armed" and (warn := _expected_pause(view, steps)):
            out.append("\n" + warn, "yellow")
        return out
    out.append("c", "bold")
    out.append(f": capture {what} with {kind}  (+/- steps, l: list)", "dim")
    warn = _expected_pause(view, steps) if t.steps > 0 else None
    if warn:
        out.append("\n" + warn, "yellow")  # (said before the window: measured on this job's last one)
    if refused is not None and (refused.seq, refused.state) == (c.seq, c.state):
        out.append("\nc refused: ", "bold red")
        out.append(safe_text(refused.message, 160))
    if c.state == "idle" and c.kind in ("nsys", "kineto") and c.message:
        out.append("\n" + safe_text(c.message, 120), "dim")  # (what a window costs the job, said before the first)
    if c.state == "failed":
        out.append(f"\nlast capture {c.seq} failed: ", "bold red")
        out.append(safe_text(c.message, 100))
    elif c.state == "done":
        s = c.summary
        covered = window_steps(c.state, c.first_step, c.last_step)
        out.append(f"\nlast capture {c.seq}: {covered + '  ' if covered else ''}", "bold")
        out.append(safe_text(((s.file if s else None) or c.path).rsplit("/", 1)[-1], 90))
        if s and s.size:
            out.append(f"  {human_bytes(s.size)}")
        out.append(f"  ({safe_text(c.kind, 20)})", "dim")  # (which kind ran: kineto, torch.profiler, nsys, memory)
        if c.cost is not None:
            out.append("\n  " + describe(c.cost), "red" if c.cost.ratio > BUDGET else "dim")
        if s and s.error:
            out.append("\n  " + safe_text(s.error, 200), "red")
        for line in (s.lines if s else [])[:4]:
            out.append("\n  " + safe_text(str(line), 110), "dim")
    return out


def _expected_pause(view: View, steps: int) -> str | None:
    """What a window of `steps` steps will cost the job, from the newest window it took whose cost
    is known, when that one was over budget."""
    for c in reversed(view.captures):
        if c.cost is not None:
            return expected_pause(c.cost, steps)
    return None
