"""The `i` line: on a process attached without the probe, loading it there (what it does and costs,
the confirmation, then what happened)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from rich.text import Text

from ...channel.text import safe_text
from .verdict import clamp

if TYPE_CHECKING:
    from ...inject import Outcome

CONFIRM_S = 5.0  # a second `i` (or `y`) within this confirms
LOADED_SHOWN_S = 10.0  # "probe loaded ..." stays this long, beside the steps it brings
LINES = 3  # the line's panel height at most (tuimon.tcss): a refusal's reason can take two

ProbeState = Literal["offered", "confirm", "loading", "loaded", "pending", "failed"]


@dataclass(frozen=True)
class ProbeLoad:
    """Where the offer stands: offered (i), confirm (i again or y, until `until`), loading, then loaded
    (shown until `until`), pending (queued in the job) or failed; words: what happened, in words."""
    state: ProbeState
    pid: int
    words: str = ""
    until: float = 0.0  # (time.monotonic())


def what_it_does() -> str:
    from ...inject import WHAT_IT_DOES  # (loaded only where the probe is missing)

    return WHAT_IT_DOES


def probe_line(p: ProbeLoad, width: int = 0) -> Text:
    """The line, fitted to LINES lines of width (0: no limit)."""
    if p.state == "offered":
        return clamp(Text(f"i: {what_it_does()}", "dim"), Text(), width, LINES)
    if p.state == "confirm":
        out = Text(f"i again (or y) within {CONFIRM_S:g} s", "bold yellow")
        out.append(f" loads tuimon's probe into PID {p.pid}")
        return out
    if p.state == "loading":
        return Text(p.words or f"loading the probe into PID {p.pid}…", "dim")
    if p.state == "loaded":
        out = Text(p.words, "green")
        out.append(" · steps from its next whole step", "dim")
        return clamp(out, Text(), width, LINES)
    out = Text("probe not loaded: " if p.state == "failed" else "probe queued: ", "bold yellow")
    out.append(safe_text(p.words, 600))
    return clamp(out, Text(), width, LINES)


def loading_words(pids: Sequence[int]) -> str:
    """'loading the probe into PID 812…', or into each of a launcher's ranks."""
    return f"loading the probe into {_pids(pids)}…"


def probe_result(pid: int, outcomes: Sequence[Outcome]) -> ProbeLoad:
    """What the loads into pid's processes came to: loaded when each runs the probe, pending when
    none failed and some are queued, else failed, with each failure's reason."""
    loaded = [o for o in outcomes if o.loaded is not None]
    pending = [o for o in outcomes if o.loaded is None and o.pending]
    failed = [o for o in outcomes if o.loaded is None and not o.pending]
    one = len(outcomes) == 1
    parts = [f"{'' if one else f'PID {o.pid}: '}{o.why}" for o in failed + pending]
    if loaded:
        slowest = max(o.loaded.seconds for o in loaded if o.loaded is not None)
        parts.append(f"probe loaded into {_pids([o.pid for o in loaded])} in {slowest:.2f} s")
    state: ProbeState = "failed" if failed or not outcomes else "pending" if pending else "loaded"
    return ProbeLoad(state, pid, " · ".join(parts) or "no process to load it into")


def _pids(pids: Sequence[int]) -> str:
    return f"PID {pids[0]}" if len(pids) == 1 else f"PIDs {', '.join(map(str, pids))}"
