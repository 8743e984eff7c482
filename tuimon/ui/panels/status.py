"""The sources failing now, each with its reason."""

from __future__ import annotations

from rich.text import Text

from ...channel.text import safe_text
from ...monitor.state import View

SOURCE_NAMES = {"channel": "channel", "capture": "capture control", "process": "process sampler",
                "gpu": "NVML", "sampler": "sampler", "py-spy": "py-spy (hot lines from outside)", "probe": "the probe"}


def status_line(view: View) -> Text:
    """The sources failing as of the last cycle, each with its reason; empty when all are well."""
    out = Text()
    for source, why in view.problems.items():
        if source == "gpu" and not view.gpus:
            continue  # the GPU panel says it in full
        if out:
            out.append("\n")
        out.append(f"⚠ {SOURCE_NAMES.get(source, source)}: ", "bold yellow")
        out.append(safe_text(why, 300))
    if view.shown_why:
        if out:
            out.append("\n")
        out.append(safe_text(view.shown_why, 300), "dim")
    return out
