"""The GPUs: numbers, sparklines, processes; a line each where more than two are shown."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text

from ...channel.text import safe_text
from ...model import NA, GpuSample, num
from ...model.units import gib, percent
from ...monitor.state import COLUMN_S, GpuView, View
from ..format import fit, gpu_process_rows, spark


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
        rows = [("SM active", h["sm_active"], percent(s.sm_active, 4), "green"),
                ("Tensor", h["tensor_active"], percent(s.tensor_active, 4), "magenta"),
                ("DRAM bw", h["dram_bw"], percent(s.dram_bw, 4), "blue"),
                ("Power", power_pct, power_txt, "yellow")]
    else:
        rows = [("GPU util (coarse)", h["util_gpu"], percent(s.util_gpu, 4), "green"),
                ("Mem-ctl util (coarse)", h["util_mem"], percent(s.util_mem, 4), "blue"),
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


GPUS_TITLE = f"GPUs · a column is {COLUMN_S} s"
COMPACT_ABOVE = 2  # more GPUs shown than this: a line each (nvitop's compact mode), each block on `g`
SPARK_MIN, SPARK_MAX = 4, 24  # the compact line's SM sparkline, in columns
VENDOR_WORDS = {"NVIDIA", "Tesla", "GeForce", "Quadro"}


def short_name(name: object) -> str:
    """'NVIDIA H200' -> 'H200', 'NVIDIA A100-SXM4-80GB' -> 'A100', 'NVIDIA GeForce RTX 4090' -> 'RTX 4090'."""
    if not isinstance(name, str):
        return "?"
    words = [w for w in safe_text(name, 60).split() if w not in VENDOR_WORDS] or ["?"]
    first = words[0].split("-")[0] or words[0]
    return f"{first} {words[1]}" if first in ("RTX", "GTX", "TITAN") and len(words) > 1 else first


@dataclass(frozen=True)
class _Col:
    """A column of the compact line: its cells (the gap before it included), where it comes in the
    order a narrow line drops columns (0: never), and its text for one GPU at that width."""

    width: int
    drop: int
    cell: Callable[[GpuView, int], Text]


def _label(word: str, value: str, color: str, width: int) -> Text:
    out = Text(f"{word} ".rjust(width - len(value)), "dim")
    out.append(value, color)
    return out


def _index(g: GpuView, width: int) -> Text:
    return Text(f"GPU {g.latest.index}".ljust(width - 2), "bold")  # (the target's mark after it: gpu_row's)


def _sm(g: GpuView, width: int) -> Text:
    """'SM ▂▄▆▇ 97%': its sparkline where the width holds one (GPUs without GPM: NVML's coarse 'util')."""
    s, h = g.latest, g.columns or g.history
    word, series, value = ("SM", h["sm_active"], percent(s.sm_active, 4)) if s.gpm else ("util", h["util_gpu"], percent(s.util_gpu, 4))
    if width == SM_WIDTH:
        return _label(word, value, "green", width)
    out = Text(f"{word} ".rjust(SM_WIDTH - len(value)), "dim")  # (the sparkline takes the rest)
    out.append(spark(series, width - len(out.plain) - len(value) - 1) + " ", "green")
    out.append(value, "green")
    return out


def _memory(s: GpuSample) -> str:
    used, total = num(s.mem_used), num(s.mem_total)
    return "n/a" if used is None and total is None else f"{gib(used):>5}/{gib(total)} GiB"


def _power(s: GpuSample) -> str:
    power, limit = num(s.power_w), num(s.power_limit_w)
    return f"{power:.0f}/{limit:.0f} W" if power is not None and limit else "n/a W"


def _clock(g: GpuView, width: int) -> Text:
    """The SM clock, or a throttle flag where its clocks are held back (the rest of the line)."""
    s = g.latest
    events = [e for e in s.clock_events if e != "GPU idle"] if isinstance(s.clock_events, list) else []
    if events:  # (its reasons where the line has room; on `g` in any case)
        reasons = "  throttle: " + ", ".join(events)
        return Text(reasons if len(reasons) <= width else "  throttle", "bold yellow")
    clock = num(s.sm_clock_mhz)
    return Text(f"  {clock:.0f} MHz" if clock is not None else "  n/a MHz", "dim")


SM_WIDTH = 8  # "  SM 97%", "util 97%"; a sparkline and its space come on top
SPARK_DROP = 4  # where the sparkline comes in the order a narrow line drops things

# The compact line, left to right (nvitop's compact mode). A line too narrow for all drops columns in
# the order of their `drop` (1 first), the SM sparkline at SPARK_DROP among them; the index and the SM % stay.
COMPACT_COLUMNS: dict[str, _Col] = {
    "index": _Col(8, 0, _index),
    "name": _Col(10, 2, lambda g, w: Text(fit(short_name(g.latest.name), w - 1).ljust(w), "bold")),
    "sm": _Col(SM_WIDTH, 0, _sm),
    "tensor": _Col(13, 8, lambda g, w: _label("  tensor", percent(g.latest.tensor_active, 4), "magenta", w)),
    "dram": _Col(11, 7, lambda g, w: _label("  DRAM" if g.latest.gpm else "  mctl", percent(
        g.latest.dram_bw if g.latest.gpm else g.latest.util_mem, 4), "blue", w)),
    "power": _Col(12, 5, lambda g, w: _label("", _power(g.latest), "yellow", w)),
    "mem": _Col(17, 6, lambda g, w: _label("", _memory(g.latest), "", w)),
    "temp": _Col(6, 3, lambda g, w: _label("", f"{g.latest.temp_c}°C" if num(g.latest.temp_c) is not None
                                           else "n/a", "", w)),
    "clock": _Col(10, 1, _clock),
}


def compact_layout(width: int) -> dict[str, int]:
    """The columns a line of `width` cells holds, each with its width: the SM column's holds its
    sparkline (SPARK_MIN to SPARK_MAX), the clock's the rest of the line."""
    widths = {k: c.width for k, c in COMPACT_COLUMNS.items()}
    widths["sm"] += SPARK_MIN + 1
    order = sorted([(c.drop, k) for k, c in COMPACT_COLUMNS.items() if c.drop] + [(SPARK_DROP, "spark")])
    for _, k in order:
        if sum(widths.values()) <= width:
            break
        if k == "spark":
            widths["sm"] = SM_WIDTH
        else:
            del widths[k]
    if widths["sm"] > SM_WIDTH:
        widths["sm"] += max(0, min(SPARK_MAX - SPARK_MIN, width - sum(widths.values())))
    if "clock" in widths:
        widths["clock"] += max(0, width - sum(widths.values()))
    return widths


def gpu_row(g: GpuView, widths: dict[str, int], is_target: bool) -> Text:
    """One GPU in one line, in the columns of compact_layout (a lost GPU: its reason in their place)."""
    out = Text()
    for k, w in widths.items():
        if k == "index" or k == "name" or g.latest.lost is None:
            out.append_text(COMPACT_COLUMNS[k].cell(g, w))
        if k == "index":
            out.append("◆ " if is_target else "  ", "cyan")
    if g.latest.lost is not None:
        out.append(fit(f"lost: {g.latest.lost.reason}", max(1, sum(widths.values()) - len(out.plain))), "bold red")
    return out


def compact_gpus(gpus: list[GpuView], width: int, targets: list[int]) -> Text:
    """A line per GPU, never longer than width."""
    widths = compact_layout(width)
    out = Text()
    for k, g in enumerate(gpus):
        if k:
            out.append("\n")
        line = gpu_row(g, widths, g.latest.index in targets)
        line.truncate(width, overflow="ellipsis")
        out.append_text(line)
    return out


def gpus_title(view: View) -> str:
    """The GPU panel's title: its detail a key away, where the panel is compact."""
    return GPUS_TITLE + (" · g: detail" if len(shown_gpus(view)) > COMPACT_ABOVE else "")


def shown_gpus(view: View) -> list[GpuView]:
    """The target's GPUs (all of them where none is known to be the target's)."""
    return [g for g in view.gpus if g.latest.index in view.target_gpus] or view.gpus


def gpus_panel(view: View, width: int) -> Text:
    if not view.gpus:
        return Text(view.problems.get("gpu") or view.gpu_note or "no GPU data yet", "dim")
    shown = shown_gpus(view)
    if len(shown) > COMPACT_ABOVE:
        out = compact_gpus(shown, width, view.target_gpus)
    else:
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
