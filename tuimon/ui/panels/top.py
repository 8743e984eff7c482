"""`tuimon top`: every GPU with its processes, and the host."""

from __future__ import annotations

from rich.text import Text

from ...monitor.state import View
from ..format import all_process_rows, fit, host_line
from .gpus import COMPACT_ABOVE, compact_gpus, gpu_block


def top_header(view: View, label: str, width: int = 0) -> Text:
    """GPUs, host CPU and memory, and the label where the width holds it (0: no limit)."""
    out = Text("tuimon top ", "bold")
    out.append(f"· {len(view.gpus)} GPU{'s' if len(view.gpus) != 1 else ''} ")
    if len(view.gpus) > COMPACT_ABOVE:
        out.append("(g: detail) ", "dim")
    if view.host is not None:
        out.append("· " + host_line(view.host).removeprefix("host: ") + " ")
    if view.paused:
        out.append(" PAUSED", "bold reverse")
    if not width or len(out.plain) + len(label) + 3 <= width:
        out.append(f" [{label}]", "dim")
    return out


def top_panel(view: View, width: int) -> Text:
    if not view.gpus:
        return Text(view.problems.get("gpu") or "no GPU data yet", "dim")
    if len(view.gpus) > COMPACT_ABOVE:  # a line per GPU (nvitop's compact mode), then one table of processes
        out = compact_gpus(view.gpus, width, [])
        out.append("\n\n")
        out.append("\n".join(fit(r, max(20, width)) for r in all_process_rows([g.latest for g in view.gpus])), "dim")
        return out
    out = Text()
    for k, g in enumerate(view.gpus):
        if k:
            out.append("\n\n")
        out.append_text(gpu_block(g, width, False, table=True))
    return out
