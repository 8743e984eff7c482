"""The memory view's panels: the caching allocator's gauges over time beside NVML's number for the
process, how full the memory is, the allocator's retries, and what the last memory capture found."""

from __future__ import annotations

from rich.text import Text

from ...analysis import memory as mem
from ...analysis import thresholds as T
from ...capture.client import MEMORY_STEPS, window_steps
from ...channel.text import safe_text
from ...model import Memory, num
from ...model.units import human_bytes
from ...monitor.state import View
from ..format import spark

LABEL = 10  # the series' names, padded


def memory_panel(view: View, width: int) -> Text:
    t = view.training
    m = t.memory if t is not None else None
    if m is None:
        why = "no channel: the allocator's numbers need the probe (tuimon run)" if t is None else \
            "no allocator numbers: the job has not used CUDA (yet), or its probe predates them"
        return Text(why, "dim")
    used, total = view.nvml_memory
    cap = m.capacity or total
    hist = view.memory_history
    out = Text()
    plot = max(10, width - LABEL - 12)
    top = max((v for series in hist.values() for v in series[-plot:] if num(v) is not None), default=None)
    for key, label, now, style in (("allocated", "allocated", m.allocated, "green"),
                                   ("reserved", "reserved", m.reserved, "cyan"),
                                   ("peak", "peak", m.peak_allocated, "yellow"), ("nvml", "NVML", used, "magenta")):
        series = hist.get(key, [])
        out.append(f"{label:<{LABEL}}")
        out.append(spark(series, plot, 0.0, top) if series and top else " " * plot, style)
        out.append(f" {human_bytes(now):>10}\n")
    scale = f"the cap of {human_bytes(m.limit)} the job set" if m.limit else human_bytes(cap) if cap else "n/a"
    out.append(f"a column is a cycle; the bars' top is the largest shown, {human_bytes(top)}, of {scale}", "dim")
    if used is not None and m.reserved is not None:
        beyond = used - m.reserved
        if beyond >= 0:
            out.append(f"\nNVML counts {human_bytes(used)} for the process: {human_bytes(beyond)} beyond the "
                       "allocator's reserved (the CUDA context, NCCL, other allocators)")
        else:
            out.append(f"\nNVML counts {human_bytes(used)} for the process, less than the allocator's reserved (read "
                       "at another moment)", "dim")
    fc = mem.forecast(m)
    if fc:
        out.append("\n" + fc, "bold red")
    elif (share := mem.peak_share(m)) is not None:
        out.append(f"\npeak {share:.0%} of {scale} ({T.MEMORY_FULL.show()} or more is full)", "dim")
    out.append("\n" + retry_words(m), "bold red" if (m.retries_per_step or 0) >= T.MEMORY_RETRIES.value else "")
    spare = mem.unallocated(m)
    if spare is not None:
        split = f", {human_bytes(m.inactive_split)} of it in split blocks not in use" if m.inactive_split else ""
        out.append(f"\nreserved but unallocated {human_bytes(spare)}{split}", "dim")
    if m.expandable is not None:
        out.append(f"\nexpandable segments {'on' if m.expandable else 'off'} (PYTORCH_CUDA_ALLOC_CONF)", "dim")
    return out


def retry_words(m: Memory) -> str:
    rate = f"{m.retries_per_step:.2f} per step (steps {m.retries_from}..{m.retries_to})" \
        if m.retries_per_step is not None else "per step not measured yet"
    total = f", {m.alloc_retries:,} in all" if num(m.alloc_retries) else ""
    ooms = f"; {m.ooms:,} out-of-memory errors" if num(m.ooms) else ""
    return f"allocator retries (its cache freed, cudaMalloc again): {rate}{total}{ooms}"


def capture_text(view: View) -> Text:
    """The memory window under way, or what the newest one found."""
    mine = [c for c in view.captures if c.kind == "memory"]
    out = Text()
    if not mine:
        out.append(f"no memory capture yet: c here (or M anywhere) records the allocator's history for {MEMORY_STEPS} "
                   "steps", "dim")
        return out
    c = mine[-1]
    covered = window_steps(c.state, c.first_step, c.last_step)
    out.append(f"memory capture {c.seq} {c.state}{'  ' + covered if covered else ''}\n", "bold")
    out.append(safe_text(c.message, 300), "dim")
    s = c.summary
    if s is not None:
        if s.file:
            out.append("\n" + safe_text(s.file, 300))
        if s.error:
            out.append("\n" + safe_text(s.error, 300), "red")
        for line in s.lines:
            out.append("\n" + safe_text(str(line), 160))
    return out
