"""The GPUs: numbers, sparklines, processes."""

from __future__ import annotations

from rich.text import Text

from ...channel.text import safe_text
from ...model import NA, num
from ...monitor.state import GpuView, View
from ..format import fit, gib, gpu_process_rows, pct, spark


def gpu_block(g: GpuView, width: int, is_target: bool, table: bool = False) -> Text:
    """One GPU: its numbers and sparklines, then its processes (a line; table: one row each)."""
    s, h = g.latest, g.history
    out = Text()
    out.append(f"GPU {s.index} ", "bold")
    out.append(safe_text(s.name, 40) if isinstance(s.name, str) else "", "bold")
    if is_target:
        out.append("  ◆ target", "cyan")
    if s.lost is not None:
        out.append(f"  lost: {safe_text(s.lost.reason, 80)}", "bold red")
        return out
    out.append(f"  mem {gib(s.mem_used)}/{gib(s.mem_total)} GiB")
    events = [e for e in s.clock_events if e != "GPU idle"] if isinstance(s.clock_events, list) else []
    throttle = "  throttle: " + ", ".join(events) if events else ""
    extras = []  # what a narrow line leaves out first: the clock, then the temperature
    if num(s.temp_c) is not None:
        extras.append(f"  {s.temp_c}°C")
    if num(s.sm_clock_mhz) is not None:
        label = "SM clock " if width >= 100 else ""
        extras.append(f"  {label}{s.sm_clock_mhz}/{s.sm_clock_max_mhz if num(s.sm_clock_max_mhz) is not None else '?'} MHz")
    while extras and width and len(out.plain) + sum(map(len, extras)) + len(throttle) > width:
        extras.pop()
    out.append("".join(extras))
    if throttle:
        out.append(throttle, "bold yellow")
    out.append("\n")
    h = g.columns or h  # the main screen's sparklines: a column per COLUMN_S
    power, limit = num(s.power_w), num(s.power_limit_w)
    power_pct = [None if v is None or not limit else 100 * v / limit for v in h["power_w"]]
    power_txt = f"{power:4.0f}/{limit:.0f} W" if power is not None and limit else "   n/a W"
    if s.gpm:
        rows = [("SM active", h["sm_active"], pct(s.sm_active), "green"),
                ("Tensor", h["tensor_active"], pct(s.tensor_active), "magenta"),
                ("DRAM bw", h["dram_bw"], pct(s.dram_bw), "blue"),
                ("Power", power_pct, power_txt, "yellow")]
    else:
        rows = [("GPU util (coarse)", h["util_gpu"], pct(s.util_gpu), "green"),
                ("Mem-ctl util (coarse)", h["util_mem"], pct(s.util_mem), "blue"),
                ("Power", power_pct, power_txt, "yellow")]
    procs = s.processes
    if isinstance(procs, list) and procs:
        parts = []
        for p in procs[:8]:
            mem = f" {gib(p.gpu_mem)} GiB" if p.gpu_mem is not None else ""
            sm = f" SM {p.sm_util}%" if p.sm_util is not None else ""
            parts.append(f"{p.pid}{mem}{sm}")
        more = f" +{len(procs) - 8}" if len(procs) > 8 else ""
        rows_line = "processes " + " · ".join(parts) + more
    elif isinstance(procs, NA):
        rows_line = f"processes: {procs.reason}"
    else:
        rows_line = "processes: none"
    label_w = max(len(r[0]) for r in rows)
    two_cols = width >= 100
    col_w = (width - 2) // 2 if two_cols else width
    spark_w = max(8, col_w - label_w - 14)
    for k, (label, series, value, color) in enumerate(rows):
        out.append(f"{label:<{label_w}} ", "dim")
        out.append(spark(series, spark_w), color)
        out.append(f" {value.strip():<11}")  # beside the newest column: one span to redraw, not two
        if two_cols and k % 2 == 0 and k + 1 < len(rows):
            out.append("  ")
        elif k + 1 < len(rows):
            out.append("\n")
    out.append("\n")
    if table and isinstance(procs, list) and procs:
        out.append("\n".join(fit(r, max(20, width)) for r in gpu_process_rows(s)), "dim")
    else:
        out.append(fit(rows_line, max(20, width)), "dim")
    if s.errors:
        out.append("\n")
        out.append(fit("NVML failed: " + "; ".join(s.errors), max(20, width)), "yellow")
    return out


def gpus_panel(view: View, width: int) -> Text:
    if not view.gpus:
        return Text(view.problems.get("gpu") or view.gpu_note or "no GPU data yet", "dim")
    shown = [g for g in view.gpus if g.latest.index in view.target_gpus] or view.gpus
    out = Text()
    for k, g in enumerate(shown):
        if k:
            out.append("\n")
        out.append_text(gpu_block(g, width, g.latest.index in view.target_gpus))
    if view.gpu_note:
        out.append("\n")
        out.append(safe_text(view.gpu_note), "dim")
    if len(shown) < len(view.gpus):
        out.append(f"\n{len(view.gpus) - len(shown)} other GPU(s) not used by the target: g for all", "dim")
    return out
