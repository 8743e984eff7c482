"""Text for the panels, built as rich Text objects: strings from other processes (range names,
command lines, process names) are appended as plain text and never parsed as markup."""

from __future__ import annotations

import time

from rich.text import Text

from ..analysis.verdict import Verdict
from ..capture.client import window_steps
from ..channel.text import safe_text
from ..monitor.state import GpuView, View
from ..sources.values import is_na, num

BLOCKS = " ▁▂▃▄▅▆▇█"
VERDICT_STYLE = {"input-bound": "bold yellow", "gpu-bound": "bold green", "host-bound": "bold red",
                 "mixed": "bold", "waiting": "dim"}


def spark(values: list, width: int, lo: float = 0.0, hi: float | None = 100.0) -> str:
    """The last `width` values as block characters; a gap where a value is unavailable."""
    vals = values[-width:] if width > 0 else []
    nums = [v for v in vals if v is not None]
    top = hi if hi is not None else (max(nums) if nums else 1.0)
    span = (top - lo) or 1.0
    out = []
    for v in vals:
        if v is None:
            out.append(" ")
        else:
            out.append(BLOCKS[max(1, min(8, round((v - lo) / span * 8)))] if v > lo else BLOCKS[1])
    return "".join(out).rjust(width)


def gib(b) -> str:
    return f"{b / 2**30:.1f}" if num(b) is not None else "n/a"


def human_bytes(b) -> str:
    b = num(b)
    if b is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(b) < 1024 or unit == "TiB":
            return f"{b:.0f} {unit}" if unit == "B" else f"{b:.1f} {unit}"
        b /= 1024
    return f"{b:.1f} TiB"


def pct(v) -> str:
    return f"{v:5.1f}%" if num(v) is not None else "   n/a"


def duration(s: float) -> str:
    s = int(s)
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def short_command(argv: list) -> str:
    """The command line with paths cut to their last part: `python train.py --lr 3e-4`."""
    def short(k, a):
        path_like = a.startswith(("/", "./", "../", "~/")) or (k == 0 and "/" in a)
        return a.rstrip("/").rsplit("/", 1)[-1] if path_like else a

    return " ".join(short(k, str(a)) for k, a in enumerate(argv))


def header(view: View, source_label: str) -> Text:
    t = view.training or {}
    p = view.process or {}
    out = Text()
    out.append("tuimon ", "bold")
    pid = t.get("pid") or p.get("pid")
    if pid:
        out.append(f"PID {pid} ", "bold cyan")
    argv = t.get("argv")
    if argv:
        out.append(safe_text(short_command(argv), 60))
        out.append(" ")
    if t.get("world_size"):
        out.append(f"· rank {t.get('rank')}/{t['world_size']} ", "dim")
    if t:
        out.append(f"· up {duration(t.get('uptime_s') or 0)} · step {t.get('steps', 0):,}", "")
        if t.get("steps_per_s"):
            out.append(f" · {t['steps_per_s']:.2f} steps/s")
        for name, per_s in list((t.get("throughput_per_s") or {}).items())[:2]:
            out.append(f" · {per_s:,.0f} ")
            out.append(safe_text(str(name), 24))
            out.append("/s")
    if p and not p.get("alive", True):
        code = p.get("exit_code")
        when = p.get("exited_at")
        at = time.strftime(" at %H:%M:%S", time.localtime(when)) if isinstance(when, (int, float)) else ""
        out.append(f"  PROCESS EXITED{at}" + (f" (code {code})" if code is not None else ""), "bold red")
        out.append(" · last numbers kept", "dim")
    if view.paused:
        out.append("  PAUSED", "bold reverse")
    out.append(f"  [{source_label}]", "dim")
    return out


def verdict_line(v: Verdict) -> Text:
    out = Text()
    out.append(f" {v.headline.upper()} ", VERDICT_STYLE.get(v.code, "bold") + " reverse")
    out.append("  ")
    out.append(v.evidence)
    return out


def gpu_block(g: GpuView, width: int, is_target: bool) -> Text:
    s, h = g.latest, g.history
    out = Text()
    name = s.get("name")
    out.append(f"GPU {s.get('index')} ", "bold")
    out.append(safe_text(str(name), 40) if isinstance(name, str) else "", "bold")
    if is_target:
        out.append("  ◆ target", "cyan")
    if is_na(s.get("lost")):
        out.append(f"  lost: {s['lost']['na']}", "bold red")
        return out
    mem = f"  mem {gib(s.get('mem_used'))}/{gib(s.get('mem_total'))} GiB"
    out.append(mem)
    if num(s.get("temp_c")) is not None:
        out.append(f"  {s['temp_c']}°C")
    if num(s.get("sm_clock_mhz")) is not None:
        label = "SM clock " if width >= 100 else ""
        out.append(f"  {label}{s['sm_clock_mhz']}/{s.get('sm_clock_max_mhz')} MHz")
    events = [e for e in (s.get("clock_events") or []) if e != "GPU idle"] if isinstance(s.get("clock_events"), list) else []
    if events:
        out.append("  throttle: " + ", ".join(events), "bold yellow")
    out.append("\n")
    power, limit = num(s.get("power_w")), num(s.get("power_limit_w"))
    power_pct = [None if v is None or not limit else 100 * v / limit for v in h["power_w"]]
    power_txt = f"{power:4.0f}/{limit:.0f} W" if power is not None and limit else "   n/a W"
    if s.get("gpm"):
        rows = [("SM active", h["sm_active"], pct(s.get("sm_active")), "green"),
                ("Tensor", h["tensor_active"], pct(s.get("tensor_active")), "magenta"),
                ("DRAM bw", h["dram_bw"], pct(s.get("dram_bw")), "blue"),
                ("Power", power_pct, power_txt, "yellow")]
    else:
        rows = [("GPU util (coarse)", h["util_gpu"], pct(s.get("util_gpu")), "green"),
                ("Mem-ctl util (coarse)", h["util_mem"], pct(s.get("util_mem")), "blue"),
                ("Power", power_pct, power_txt, "yellow")]
    procs = s.get("processes")
    if isinstance(procs, list) and procs:
        parts = []
        for p in procs[:8]:
            mem = f" {gib(p['gpu_mem'])} GiB" if num(p.get("gpu_mem")) is not None else ""
            sm = f" SM {p['sm_util']}%" if num(p.get("sm_util")) is not None else ""
            parts.append(f"{p['pid']}{mem}{sm}")
        more = f" +{len(procs) - 8}" if len(procs) > 8 else ""
        rows_line = "processes " + " · ".join(parts) + more
    elif is_na(procs):
        rows_line = f"processes: {procs['na']}"
    else:
        rows_line = "processes: none"
    label_w = max(len(r[0]) for r in rows)
    two_cols = width >= 100
    col_w = (width - 2) // 2 if two_cols else width
    spark_w = max(8, col_w - label_w - 14)
    for k, (label, series, value, color) in enumerate(rows):
        out.append(f"{label:<{label_w}} ", "dim")
        out.append(spark(series, spark_w), color)
        out.append(f" {value:>11}")
        if two_cols and k % 2 == 0 and k + 1 < len(rows):
            out.append("  ")
        elif k + 1 < len(rows):
            out.append("\n")
    out.append("\n")
    out.append(safe_text(rows_line, max(20, width)), "dim")
    return out


def gpus_panel(view: View, width: int) -> Text:
    if not view.gpus:
        return Text(view.gpu_note or "no GPU data yet", "dim")
    shown = [g for g in view.gpus if g.latest.get("index") in view.target_gpus] or view.gpus
    out = Text()
    for k, g in enumerate(shown):
        if k:
            out.append("\n")
        out.append_text(gpu_block(g, width, g.latest.get("index") in view.target_gpus))
    if view.gpu_note:
        out.append("\n")
        out.append(safe_text(view.gpu_note), "dim")
    if len(shown) < len(view.gpus):
        out.append(f"\n{len(view.gpus) - len(shown)} other GPU(s) not used by the target: g for all", "dim")
    return out


def steps_panel(view: View, width: int) -> Text:
    t = view.training or {}
    st = t.get("step_time_ms")
    if not st:
        return Text("no steps yet (steps come from optimizer.step() or tuimon.step())", "dim")
    out = Text()
    stats = f" p50 {st['p50']:.1f}  p95 {st['p95']:.1f}  p99 {st['p99']:.1f} ms  (last {t.get('window_steps')} steps)"
    series = view.step_ms
    hi = max(series[-max(1, width - len(stats) - 1):] or [1.0])
    out.append(spark(series, max(8, width - len(stats) - 1), hi=hi), "cyan")
    out.append(stats)
    return out


def breakdown_panel(view: View, width: int) -> Text:
    t = view.training or {}
    parts = t.get("breakdown")
    if not parts:
        return Text("not enough steps yet", "dim")
    out = Text()
    colors = ["yellow", "green", "magenta", "blue", "cyan", "red", "white"]
    bar_w = max(10, width - 2)
    bar = Text()
    items = list(parts.items())
    for k, (name, share) in enumerate(items):
        color = "grey50" if name == "unaccounted" else colors[k % len(colors)]
        n = round(share * bar_w)
        bar.append("█" * n, color)
    out.append_text(bar)
    out.append("\n")
    used = 0
    for k, (name, share) in enumerate(items):  # the legend wraps between items, never inside one
        color = "grey50" if name == "unaccounted" else colors[k % len(colors)]
        label = safe_text(str("data wait" if name == "data_wait" else name), 30)
        item_w = 2 + len(label) + len(f" {share:.0%}") + 3
        if used and used + item_w > width:
            out.append("\n")
            used = 0
        out.append("■ ", color)
        out.append(label)
        out.append(f" {share:.0%}   ", "bold")
        used += item_w
    dropped = t.get("dropped") or 0
    if dropped:
        out.append(f"\n{dropped:,} records dropped (ring overrun)", "yellow")
    return out


def process_panel(view: View) -> Text:
    p = view.process
    if not p:
        return Text("no process data", "dim")
    if not p.get("alive"):
        return Text("process exited", "bold red")
    out = Text()
    rows = p.get("procs") or []
    target = [r for r in rows if r.get("role") == "target"]
    children = [r for r in rows if r.get("role") == "child"]

    def cpu_rss(rs):
        cpu = sum(r["cpu_percent"] for r in rs if num(r.get("cpu_percent")) is not None)
        rss = sum(r["rss"] for r in rs if num(r.get("rss")) is not None)
        return cpu, rss

    if target:
        r = target[0]
        cpu, rss = cpu_rss(target)
        out.append("target ", "dim")
        out.append(safe_text(str(r.get("name")), 30))
        out.append(f"  CPU {cpu:.0f}%  RSS {human_bytes(rss)}  threads {r.get('threads')}  {r.get('state')}")
    if children:
        cpu, rss = cpu_rss(children)
        out.append(f"\nworkers {len(children)}", "dim")
        out.append(f"  CPU {cpu:.0f}%  RSS {human_bytes(rss)}")
        per = "  ".join(f"{r['pid']}:{r['cpu_percent']:.0f}%" for r in children[:6] if num(r.get("cpu_percent")) is not None)
        out.append(f"  ({per})", "dim")
    return out


def capture_panel(view: View, steps: int) -> Text:
    """Which capture `c` takes, or how the current one is going, and what the last one found."""
    t = view.training or {}
    c = view.capture or {}
    kind = t.get("capture_kind") or "torch.profiler"
    out = Text()
    if not t or not c:
        return Text("captures need a live job with the probe (tuimon attach / run)", "dim")
    if c.get("error"):
        return Text(safe_text(str(c["error"])), "red")
    what = f"{steps} steps" if (t.get("steps") or 0) > 0 else "10 s (no steps seen)"
    state = c.get("name", "idle")
    if state in ("armed", "capturing", "writing"):
        out.append(f"capture {c.get('ack_seq')} {state}", "bold yellow")
        steps = window_steps(state, c.get("first_step"), c.get("last_step"))
        if steps:
            out.append("  " + steps)
        out.append("  " + safe_text(str(c.get("message", "")), 80), "dim")
        return out
    out.append("c", "bold")
    out.append(f": capture {what} with {kind}  (+/- steps, l: list)", "dim")
    if state == "failed":
        out.append(f"\nlast capture {c.get('ack_seq')} failed: ", "bold red")
        out.append(safe_text(str(c.get("message", "")), 100))
    elif state == "done":
        s = c.get("summary") or {}
        steps = window_steps(state, c.get("first_step"), c.get("last_step"))
        out.append(f"\nlast capture {c.get('ack_seq')}: {steps + '  ' if steps else ''}", "bold")
        out.append(safe_text(str(s.get("file") or c.get("path") or "").rsplit("/", 1)[-1], 90))
        if s.get("size"):
            out.append(f"  {human_bytes(s['size'])}")
        for line in (s.get("lines") or [])[:4]:
            out.append("\n  " + safe_text(str(line), 110), "dim")
    return out
