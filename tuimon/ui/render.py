"""Text for the panels, built as rich Text objects: strings from other processes (range names,
command lines, process names) are appended as plain text and never parsed as markup."""

from __future__ import annotations

import io
import os
import time

from rich.console import Console
from rich.text import Text

from ..analysis import thresholds as T
from ..analysis.anatomy import how_of
from ..analysis.diagnosis import Verdict
from ..capture.client import window_steps
from ..capture.cost import BUDGET, describe, expected_pause
from ..channel.procinfo import how_it_ended
from ..channel.text import safe_text
from ..model import NA, Comparison, num
from ..monitor.state import GpuView, View

BLOCKS = " ▁▂▃▄▅▆▇█"
VERDICT_STYLE = {"exited": "bold red", "stalled": "bold red", "copy-bound": "bold yellow",
                 "input-bound": "bold yellow", "sync-bound": "bold red", "host-bound": "bold red",
                 "memory-bound": "bold magenta", "compute-bound": "bold green", "healthy": "bold green",
                 "cpu-bound": "bold yellow",
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
    """A percentage, whole: the tenths changed every second and cost bytes, not information."""
    return f"{v:3.0f}%" if num(v) is not None else " n/a"


def fit(s: str, width: int) -> str:
    """s made safe for the terminal and cut to width characters (with its "…"), so it never wraps."""
    s = safe_text(s, max(width, 1) * 4)
    return s if len(s) <= width else s[: max(width - 1, 0)] + "…"


def duration(s: float) -> str:
    s = int(s)
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def seconds(s: float) -> str:
    """A span as people say it: 0.4 s, 12 s, 4 min 12 s, 1:02:03."""
    if s < 10:
        return f"{s:.1f} s"
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{int(s) // 60} min {int(s) % 60:02d} s"
    return duration(s)


STEP_SOURCE_WORDS = {"optimizer": "optimizer.step()", "tuimon.step": "tuimon.step()",
                     "backward": "each backward() (no optimizer step seen)",
                     "forward": "each model call (no backward seen)", "dataloader": "each DataLoader batch (no model "
                     "call seen)"}


def now_line(view: View, width: int = 0) -> Text:
    """What the loop is doing now: the step in progress, its open phase and for how long, and
    where the loop thread is. Empty without a live channel."""
    t = view.training
    n = t.now if t is not None and t.state == "alive" else None
    if n is None:
        return Text()
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
    if where:
        out.append(fit(where, max(10, (width or 10**6) - len(out.plain))), "dim")
    return out


def short_command(argv: list) -> str:
    """The command line with paths cut to their last part: `python train.py --lr 3e-4`."""
    def short(k, a):
        path_like = a.startswith(("/", "./", "../", "~/")) or (k == 0 and "/" in a)
        return a.rstrip("/").rsplit("/", 1)[-1] if path_like else a

    return " ".join(short(k, str(a)) for k, a in enumerate(argv))


def header(view: View, source_label: str, rates: View | None = None, width: int = 0) -> Text:
    """Who, how long, how fast. rates: the view the window's steps/s and throughput come from
    (default: view). width: fit it there, so it never wraps (0: no limit): rates the width cannot
    hold are left out, the command is cut, then the label and "last numbers kept" left out; what
    still does not fit is cut with "…"."""
    t, p = view.training, view.process
    r = (rates or view).training or t
    pid = t.pid if t else p.pid if p else None
    what = ""
    if t and t.argv:
        what = safe_text(short_command(t.argv) + (f" [+{t.argv_cut} args cut]" if t.argv_cut else ""), 200)
    elif p:
        target = next((x for x in p.procs if x.role == "target"), None)
        if target is not None and isinstance(target.name, str):
            what = safe_text(target.name, 40)
    exited = at = kept = ""
    if p and not p.alive:
        exited = "  PROCESS EXITED"
        at = time.strftime(" at %H:%M:%S", time.localtime(p.exited_at)) if p.exited_at else ""
        how = f" ({how_it_ended(p.exit_code)})" if p.exit_code is not None else ""
        kept = " · last numbers kept"
    paused = "  PAUSED" if view.paused else ""
    rest = Text()
    if t and t.world_size:
        rest.append(f" · rank {t.rank}/{t.world_size}", "dim")
    if t:
        rest.append(f" · up {duration(t.uptime_s)} · step {t.steps:,}")
        rates = [f" · {step_time(r.step_time_ms.mean)}/step{_gpu_beside(r)}"] if r.step_time_ms else []
        if r.steps_per_s:  # (the same number, inverted: beside it)
            rates = [rates[0] + f" ({r.steps_per_s:.3g}/s)"] if rates else [f" · {r.steps_per_s:.3g} steps/s"]
        rates += [f" · {per_s:,.0f} {safe_text(str(name), 24)}/s" for name, per_s in list(r.throughput_per_s.items())[:2]]
        if view.stall is not None and view.stall.stalled:  # (the rates are the steps before it stopped)
            rates = [f" · no step for {seconds(view.stall.quiet_s)}"]
        fixed = len(exited) + (len(how) if exited else 0) + len(paused)
        for rate in rates:  # a narrow terminal keeps what fits, the step time first
            if not width or 7 + 12 + len(f"PID {pid} ") + len(rest.plain) + fixed + len(rate) <= width:
                rest.append(rate)
    optional = {"label": f"  [{source_label}]", "kept": kept, "at": at}
    if width:  # the command is cut first (to 24 characters, then 12), left out in turn: the label, "kept", the time
        room = width - 7 - (len(f"PID {pid} ") if pid else 0) - len(rest.plain) - len(exited) - len(paused)
        room -= len(how) if exited else 0
        for name, keep in (("label", 24), ("kept", 12), ("at", 12)):
            if room - min(len(what), keep) < sum(map(len, optional.values())):
                optional[name] = ""
        left = room - sum(map(len, optional.values()))
        if len(what) > left:
            what = what[:left - 1] + "…" if left > 4 else ""
    out = Text()
    out.append("tuimon ", "bold")
    if pid:
        out.append(f"PID {pid} " if what else f"PID {pid}", "bold cyan")
    out.append(what)
    out.append_text(rest)
    if exited:
        out.append(f"{exited}{optional['at']}{how}", "bold red")
    out.append(optional["kept"], "dim")
    out.append(paused, "bold reverse")
    out.append(optional["label"], "dim")
    if width and out.cell_len > width:  # (a terminal too narrow for even the essentials)
        out.truncate(width - 1)
        out.append("…")
    return out


def _gpu_beside(t) -> str:
    """The GPU's time per step (CUDA events), beside the host's: ' (GPU 69.3 ms)'."""
    ms = t.gpu.step_mean_ms if t.gpu is not None else None
    return f" (GPU {step_time(ms)})" if ms is not None else ""


def ended_panel(view: View, lines: int = 8) -> Text:
    """A job tuimon started, once it ended: where its output went, and its last lines."""
    end = view.job_end
    if end is None or not (end.log or end.log_tail):
        return Text()
    out = Text("its output: ", "bold")
    out.append(safe_text(end.log or "(not kept)", 300))
    for line in end.log_tail[-lines:]:
        out.append("\n  " + safe_text(line, 300), "dim")
    return out


VERDICT_LINES = 4  # the verdict panel's height (tuimon.tcss): the numbers take at most 2 of them


def verdict_line(v: Verdict, width: int = 0) -> Text:
    """The verdict, its numbers, and on the next line the next step (e: every rule, explained).
    width: fit the panel's VERDICT_LINES there (0: no limit): the numbers and the next step are
    each cut short with "…" rather than mid-sentence by the panel's edge."""
    numbers = Text()
    numbers.append(f" {v.headline.upper()} ", VERDICT_STYLE.get(v.code, "bold") + " reverse")
    numbers.append("  ")
    numbers.append(safe_text(v.evidence, 300))
    numbers = clamp(numbers, Text(), width, 2)
    step = Text()
    step.append("→ ", "bold")
    step.append(safe_text(v.next_step, 400))
    tail = Text(f"  ({v.confidence} confidence; e: why)", "dim") if v.code != "waiting" else Text()
    step = clamp(step, tail, width, VERDICT_LINES - wrapped_lines(numbers, width))
    return Text("\n").join([numbers, step])


_CONSOLE = Console(file=io.StringIO(), width=1000, color_system=None)  # wraps text as the panels do; draws nothing


def wrapped_lines(text: Text, width: int) -> int:
    """How many lines text takes in a panel width cells wide (0: one per line of it)."""
    return len(text.wrap(_CONSOLE, width)) if width else len(text.plain.split("\n"))


def clamp(head: Text, tail: Text, width: int, lines: int) -> Text:
    """head then tail in at most `lines` lines of width (0: no limit): where they take more, head
    is cut short at a word, with "…"; tail stays whole."""
    if not width or wrapped_lines(head + tail, width) <= lines:
        return head + tail

    def cut(n: int) -> Text:
        short = head[:n]
        short.rstrip()
        return short + Text("…") + tail

    lo, hi = 0, len(head.plain)  # the longest head[:n] that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if wrapped_lines(cut(mid), width) <= lines else (lo, mid - 1)
    space = head.plain.rfind(" ", 0, lo + 1)
    return cut(space if space > lo - 20 and space > 0 else lo)


BASELINE_STYLE = {"regression": "bold red", "faster": "bold green", "same": "bold green", "collecting": "dim"}


def step_time(ms: float) -> str:
    """A step time as people read it: 0.84 ms, 80.8 ms, 2.00 s."""
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:.1f} ms" if ms < 1000 else f"{ms / 1e3:.2f} s"


def vs(now: float, then: float) -> str:
    """'161.1 ms vs 80.8', '3.01 s vs 2.00': the unit once, the baseline's in the same unit."""
    if now >= 1000 or then >= 1000:
        return f"{now / 1e3:.2f} s vs {then / 1e3:.2f}"
    return f"{step_time(now)} vs {then:.2f}" if now < 10 and then < 10 else f"{step_time(now)} vs {then:.1f}"


def peak_memory_words(c: Comparison) -> str:
    """'peak memory +18%: 61.0 → 72.1 GiB' (empty: no allocator numbers on one side)."""
    m = c.peak_memory
    if m is None:
        return ""
    return f"peak memory {m.ratio - 1:+.0%}: {gib(m.baseline_bytes)} → {gib(m.now_bytes)} GiB"


def baseline_panel(c: Comparison, width: int = 0) -> Text:
    """The job against its baseline: the alert and its size, then what moved (the phase that grew
    most first). Each line is cut to width (0: not cut), so the panel keeps its height and a
    changed number re-sends only its cells. The p-value is shown where it decided something."""
    out = Text()
    memory_grew = c.peak_memory is not None and c.peak_memory.grew
    state = "regression" if c.regressed else c.state
    head = {"regression": "REGRESSION", "faster": "FASTER", "same": "AS BASELINE", "collecting": "BASELINE"}[state]
    out.append(f" {head} ", BASELINE_STYLE[state] + " reverse")
    out.append("  ")
    room = (width - len(head) - 4) if width else 10**6
    name = os.path.basename(c.file) or c.file
    held = "" if not c.since_s else f" for {c.since_s:.0f} s" if c.since_s < 120 else f" for {duration(c.since_s)}"
    memory = ""
    if memory_grew:
        memory = f"{peak_memory_words(c)} from {name}{held} (bar: {T.PEAK_MEMORY_FACTOR.show()}); step time: "
        held = ""
    if c.state == "collecting":
        lead = memory or f"{name}: "
        line = fit(lead + c.progress + _warmup_words(c), room)
        out.append(line[:len(lead)], "bold" if memory else "dim")
        out.append(line[len(lead):], "dim")
        # (a second line, as every state has: the panel keeps its height when the comparison starts)
        base = (f"mean step {step_time(c.baseline_mean_ms)} over {c.baseline_steps:,} steps"
                if c.baseline_mean_ms is not None else f"{c.baseline_steps:,} steps")
        out.append("\n→ ", "bold")
        out.append(fit(f"the baseline: {base}" + "".join(f"  ({n})" for n in c.notes), (width - 2) if width else 10**6),
                   "dim")
        return out
    change = c.ratio - 1
    if c.state == "regression":
        lead = memory + f"{change:.0%} slower than {name}{held}: "
    elif c.state == "faster":
        lead = memory + f"{-change:.0%} faster than {name}: "
    else:
        lead = memory or f"no regression from {name} (bar {T.REGRESSION_FACTOR.show()}, {T.REGRESSION_P.show()}): "
    p = "" if c.state == "same" else ", p < 0.001" if c.p_value < 0.001 else f", p = {c.p_value:.3f}"
    rest = f"mean step {vs(c.mean_ms, c.baseline_mean_ms)} ({change:+.0%}; last {c.window_s:.0f} s, {c.window_steps:,} steps{p})"
    line = fit(lead + rest, room)
    out.append(line[:len(lead)], "bold" if c.regressed else "")
    out.append(line[len(lead):])
    moved = []
    if c.gpu_grown is not None:
        g = c.gpu_grown
        moved.append(f"the GPU's work grew: {g.baseline_ms:.1f} → {g.now_ms:.1f} ms/step ({g.delta_ms:+.1f}, CUDA events)")
    if c.gpu_grown is not None and c.grown is not None:
        moved.append(f"the loop waits for it in {safe_text(c.grown.name, 24)} ({c.grown.delta_ms:+.1f} ms)")
    elif c.grown is not None:
        g = c.grown
        moved.append(f"{safe_text(g.name, 24)} grew most: {g.baseline_ms:.1f} → {g.now_ms:.1f} ms/step "
                     f"({g.delta_ms:+.1f})")
    if c.steps_per_s is not None and c.baseline_steps_per_s:
        moved.append(f"steps/s {c.steps_per_s:.3g} vs {c.baseline_steps_per_s:.3g}")
    for k, v in list(c.throughput_per_s.items())[:1]:
        if c.baseline_throughput_per_s.get(k):
            moved.append(f"{safe_text(k, 24)}/s {v:,.0f} vs {c.baseline_throughput_per_s[k]:,.0f}")
    if c.p50_ms is not None and c.baseline_p50_ms is not None:
        moved.append(f"p50 {vs(c.p50_ms, c.baseline_p50_ms)}")
    if c.p95_ms is not None and c.baseline_p95_ms is not None:
        moved.append(f"p95 {vs(c.p95_ms, c.baseline_p95_ms)}")
    if c.data_wait_share is not None and c.baseline_data_wait_share is not None:
        moved.append(f"data wait {c.data_wait_share:.0%} vs {c.baseline_data_wait_share:.0%}")
    if c.gpu_step_ms is not None and c.baseline_gpu_step_ms is not None and c.gpu_grown is None:
        moved.append(f"GPU step {c.gpu_step_ms:.1f} vs {c.baseline_gpu_step_ms:.1f} ms")
    if c.peak_memory is not None and not memory_grew:
        moved.append(peak_memory_words(c))
    notes = "".join(f"  ({note})" for note in c.notes)
    if moved or notes:
        out.append("\n→ ", "bold")
        line = fit(" · ".join(moved) + notes, (width - 2) if width else 10**6)
        cut = min(len(line), len(" · ".join(moved)))
        out.append(line[:cut])
        out.append(line[cut:], "yellow")
    return out


def _warmup_words(c: Comparison) -> str:
    """What the warm-up is, while it lasts."""
    if "warm-up" not in c.progress:
        return ""
    return (f": the job's first {T.REGRESSION_WARMUP_S.value:g} s and {T.REGRESSION_WARMUP_STEPS.value:g} steps "
            f"are left out, then {T.REGRESSION_BATCHES.value:g} batches of {T.REGRESSION_BATCH_S.value:g} s or a step")


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


def steps_panel(view: View, width: int, stats: View | None = None) -> Text:
    """Step time: sparklines from view, the window's statistics from stats (default: view)."""
    if view.training is None:
        return no_channel_text(view)
    t = (stats or view).training or view.training
    st = t.step_time_ms
    if not st:
        return Text("no steps yet (a step ends at the loop's optimizer.step(), else at its backward(), its model "
                    "call or its DataLoader's next())", "dim")
    out = Text()
    source = "" if t.step_source in (None, "optimizer") else f"; a step: {STEP_SOURCE_WORDS.get(t.step_source, t.step_source)}"
    stats = f" mean {st.mean:.1f}  p50 {st.p50:.1f}  p95 {st.p95:.1f}  p99 {st.p99:.1f} ms  (last {t.window_steps} steps{source})"
    g = t.gpu
    gpu_stats = ""
    if g is not None:
        times = ([f"mean {g.step_mean_ms:.1f}"] if g.step_mean_ms is not None else []) + \
            ([f"p50 {g.step_ms:.1f}"] if g.step_ms is not None else [])
        gpu_stats = (f" {'  '.join(times)} ms" if times else " n/a") + f" · busy >= {g.busy_share:.0%}"
        if g.lag_ms is not None:
            gpu_stats += f" · {g.lag_ms:.1f} ms queued at step end"
    series = view.step_columns or view.step_ms
    spark_w = max(8, width - max(len(stats), len(gpu_stats)) - 6)
    hi = max([v for v in series[-spark_w:] if v is not None] + [v for v in view.gpu_step_columns[-spark_w:]
                                                                 if v is not None] or [1.0])
    out.append("host ", "dim")
    out.append(spark(series, spark_w, hi=hi), "cyan")
    out.append(stats)
    if g is not None:
        out.append("\nGPU  ", "dim")
        out.append(spark(view.gpu_step_columns, spark_w, hi=hi), "green")
        out.append(gpu_stats)
    return out


def no_channel_text(view: View) -> Text:
    """What the loop's own timings need, when the process has no channel (attach to any PID)."""
    why = view.channel.reason if isinstance(view.channel, NA) else "no channel yet"
    out = Text("no channel: ", "bold yellow")
    out.append(safe_text(why, 300))
    out.append("\nThe loop's own timings (steps, data waits, ranges) need the probe: restart the job with "
               "`tuimon run -- <command>`, or call tuimon.instrument() in it; tuimon picks the channel up "
               "as soon as it appears. GPU and process numbers need neither" + (
                   ", and the main thread's hot lines are sampled from outside (below)." if view.outside is not None
                   else "."), "dim")
    return out


PHASE_STYLE = {"data": "yellow", "copy": "bright_yellow", "forward": "blue", "backward": "magenta", "optimizer": "cyan",
               "sync": "red",
               "comm": "green", "other": "grey50"}
FILLS = "█▓▒░▚▞▙▟"  # without colour (NO_COLOR) each part of the bar gets its own fill


def stacked_bar(parts: list[tuple[str, float, str]], width: int, plain: bool) -> Text:
    """(label, share, style) as one bar of width cells, and a legend that wraps between items.
    Cumulative rounding: one share moving moves only its own edges."""
    out, cum, start = Text(), 0.0, 0
    for k, (_, frac, style) in enumerate(parts):
        cum += frac
        end = min(width, round(cum * width))
        out.append((FILLS[k % len(FILLS)] if plain else "█") * (end - start), style)
        start = end
    out.append("\n")
    used = 0
    for k, (label, frac, style) in enumerate(parts):
        item = f"{FILLS[k % len(FILLS)] if plain else '■'} {label} {frac:.0%}   "
        if used and used + len(item) > width + 2:
            out.append("\n")
            used = 0
        out.append(item[:2], style)
        out.append(item[2:-len(f" {frac:.0%}   ")])
        out.append(f" {frac:.0%}   ", "bold")
        used += len(item)
    return out


def breakdown_panel(view: View, width: int, plain: bool = False) -> Text:
    """The step's phases on the loop thread (with the user's own top-level ranges beside them),
    or, from a probe without phases, data wait, top-level ranges and the unaccounted rest."""
    t = view.training
    if t is None:
        return outside_panel(view, width) if view.outside is not None else Text("needs the probe (see above)", "dim")
    bar_w = max(10, width - 2)
    if t.phases:
        out = stacked_bar([(p.name, p.share, PHASE_STYLE.get(p.name, "white")) for p in t.phases], bar_w, plain)
        per_step = "  ".join(f"{p.name} {p.mean_ms:.1f}" for p in t.phases)
        out.append(f"\nms per step: {per_step}", "dim")
        ranges = [r for r in t.ranges if r.depth == 0 and r.share]
        if ranges:
            out.append("\nyour ranges: ", "dim")
            out.append(" · ".join(f"{safe_text(r.name, 30)} {r.share:.0%}" for r in ranges[:8]))
        for h in top_lines(t, 2):  # (h: all of them)
            out.append("\n")
            out.append(fit(f"{h.phase} {h.share:.0%}: {h.line}", max(20, width - 12)))
            out.append(f"  {how_words(h)}", "dim")
    elif t.breakdown:
        colors = ["yellow", "green", "magenta", "blue", "cyan", "red", "white"]
        parts = [("data wait" if name == "data_wait" else safe_text(name, 30), frac,
                  "grey50" if name == "unaccounted" else colors[k % len(colors)])
                 for k, (name, frac) in enumerate(t.breakdown.items())]
        out = stacked_bar(parts, bar_w, plain)
    else:
        return Text("not enough steps yet", "dim")
    if t.comm is not None:
        gpu = (f"{t.comm.gpu_ms:.1f} ms/step waiting on the GPU (CUDA events), " if t.comm.gpu_ms is not None else "")
        out.append(f"\ncollectives: {gpu}{t.comm.host_ms:.1f} ms on the loop thread · {t.comm.share:.0%} of the step · "
                   f"{t.comm.mb_per_step or 0:,.0f} MB per step", "dim")
    if t.syncs and t.syncs.per_step:
        out.append(f"\nsyncs: {t.syncs.per_step:,.1f} per step, {t.syncs.mean_us:,.0f} us each", "dim")
        if t.syncs.top:
            out.append(" · " + " · ".join(f"{safe_text(s.site, 50)} {s.per_step:,.1f}/step" for s in t.syncs.top[:3]),
                       "dim")
    if t.dropped:
        out.append(f"\n{t.dropped:,} records dropped (ring overrun)", "yellow")
    return out


def outside_words(o) -> str:
    """How the lines from outside were sampled: 'main thread (MainThread) of PID 812, sampled from
    outside by py-spy 0.4.2 at 25 Hz · 480 samples over the last 10 s'."""
    name = f" ({safe_text(o.thread, 30)})" if o.thread else ""
    span = f" · {o.samples:,} samples over the last {o.seconds:.0f} s" if o.samples else ""
    others = f" · {o.threads - 1} other Python thread{'s' if o.threads > 2 else ''}" if o.threads > 1 else ""
    return (f"main thread{name} of PID {o.pid}, sampled from outside by {safe_text(o.tool, 40)} at {o.rate_hz:g} Hz"
            f"{span}{others}")


def outside_panel(view: View, width: int, lines: int = 3) -> Text:
    """No probe: the main thread's top lines sampled from outside (py-spy), or why there are none."""
    o = view.outside
    if o.state == "failed":
        out = Text("hot lines: ", "bold yellow")
        out.append(safe_text(o.why, 600))
        return out
    if not o.hot_lines or o.samples < T.HOT_MIN_SAMPLES.value:
        return Text(safe_text(o.why, 300) if o.why else f"{o.samples} samples of the main thread so far", "dim")
    out = Text(fit(outside_words(o), max(20, width)), "dim")
    for h in o.hot_lines[:lines]:
        out.append("\n")
        out.append(fit(f"{h.share:>4.0%}  {h.line}", max(20, width - 26)))
        out.append(f"  {how_words(h)}", "dim")
    out.append("\noutside: no phases without the probe · h: every line · the step's anatomy needs `tuimon run`", "dim")
    return out


def top_lines(t, n: int) -> list:
    """The loop thread's n hottest lines of the window, once there are samples enough to say."""
    if t is None or t.samples < T.HOT_MIN_SAMPLES.value:
        return []
    return sorted(t.hot_lines, key=lambda h: -h.share)[:n]


def how_words(h) -> str:
    """How the loop thread was at a line: 'Python', 'in a native call 80%', ... (its largest)."""
    word, share = how_of(h)
    return word if share >= 0.95 else f"{word} {share:.0%}"


def hot_lines_text(view: View, width: int) -> Text:
    """Every phase's hottest lines (the h screen): where the loop thread's samples fell."""
    t = view.training
    if t is None:
        return _outside_lines_text(view, width)
    if not t.hot_lines:
        return Text("no samples yet: the probe samples the loop thread 50 times a second (TUIMON_SAMPLE_HZ)", "dim")
    out = Text(f"{t.samples:,} samples of the loop thread over the window · share of its time · share of the phase · "
               "how it was there\n", "dim")
    phase = None
    for h in t.hot_lines:
        if h.phase != phase:
            phase = h.phase
            out.append(f"\n{phase}\n", "bold")
        out.append(f"  {h.share:>4.0%} {h.phase_share:>5.0%}  ")
        out.append(fit(h.line, max(20, width - 46)))
        out.append(f"  Python {h.python:.0%} · native {h.native:.0%} · blocked {h.waiting:.0%}\n", "dim")
    return out


def _outside_lines_text(view: View, width: int) -> Text:
    """The h screen without the probe: every line of the main thread sampled from outside."""
    o = view.outside
    if o is None:
        return Text("needs the probe (tuimon run), or `tuimon attach` to sample the main thread from outside", "dim")
    if o.state == "failed" or not o.hot_lines:
        return outside_panel(view, width)
    out = Text(outside_words(o) + " · share of its time · how it was there\n", "dim")
    out.append("\noutside: no phases without the probe\n", "bold")
    for h in o.hot_lines:
        out.append(f"  {h.share:>4.0%}  ")
        out.append(fit(h.line, max(20, width - 46)))
        out.append(f"  Python {h.python:.0%} · native {h.native:.0%} · blocked {h.waiting:.0%}\n", "dim")
    if o.errors:
        out.append(f"\n{o.errors:,} samples py-spy could not read (a stack changing under it) left out", "dim")
    return out


def ranks_panel(view: View, width: int = 0, shown: int | None = None) -> Text:
    """One line per rank: its GPU and SM activity, step time, own work, time in collectives, data
    wait and largest phase; * marks the rank shown in detail (shown: its PID), the straggler is named."""
    shown = shown if shown is not None else view.training.pid if view.training else None
    slow = view.straggler if view.verdict.code == "straggler" else None
    out = Text(fit(f"{'rank':>5} {'pid':>7} {'GPU':>3} {'SM':>5} {'step p50/p95 ms':>16} {'own ms':>7} "
                   f"{'comm ms':>13} {'data':>5}  top phase", width or 200), "dim")
    for r in view.ranks:
        mark = "*" if r.pid == shown else " "
        gpu = "-" if r.gpu is None else str(r.gpu)
        sm = "n/a" if r.sm_active is None else f"{r.sm_active:.0f}%" + ("~" if r.sm_coarse else "")
        step = "n/a" if r.step_p50_ms is None else f"{r.step_p50_ms:.1f}/{r.step_p95_ms:.1f}"
        own = "n/a" if r.own_ms is None else f"{r.own_ms:.1f}"
        comm = "n/a" if r.comm_ms is None else f"{r.comm_ms:.1f} ({r.comm_share:.0%})"
        data = "n/a" if r.data_wait_share is None else f"{r.data_wait_share:.0%}"
        work = {k: v for k, v in r.phases.items() if k != "comm"}
        total = sum(r.phases.values())
        top = max(work, key=work.get) if work else None
        phase = f"{top} {work[top] / total:.0%}" if top and total > 0 else "-"
        rank = "?" if r.rank is None else str(r.rank)
        line = (f"{mark}{rank:>4} {r.pid:>7} {gpu:>3} {sm:>5} {step:>16} {own:>7} {comm:>13} {data:>5}  {phase}")
        flag = ""
        if r.state != "alive":
            line += "  exited"
        elif r.stalled:
            quiet = r.since_step_s if r.since_step_s is not None else r.now_phase_s
            flag = f"  STALLED in {r.now_phase or '?'}" + (f", no step for {seconds(quiet)}" if quiet else "")
        elif slow is not None and r.pid == slow.pid:
            flag = f"  STRAGGLER {slow.ratio:.1f}x"
        line = fit(line + flag, width or 200)
        out.append("\n" + line[:len(line) - len(flag)] if flag else "\n" + line, "dim" if r.state != "alive" else "")
        if flag:
            out.append(line[len(line) - len(flag):], "bold red" if r.stalled else "bold yellow")
    return out


def process_panel(view: View, stats: View | None = None) -> Text:
    """The training process (and its launcher, when the channel is a descendant's), its DataLoader
    workers, other subprocesses. Whether it lives comes from view; CPU and memory from stats (the
    window view: 1 s CPU readings jitter, and each redraw is bytes to the terminal). Memory is PSS
    where readable: forked workers share most of their pages, which RSS would count once each."""
    if view.process is not None and not view.process.alive:
        return Text("process exited", "bold red")
    p = (stats or view).process or view.process
    if not p:
        return Text(view.problems.get("process") or "no process data", "dim")
    out = Text()
    target = next((r for r in p.procs if r.role == "target"), None)
    loop = next((r for r in p.procs if r.loop), None) or target
    rest = [r for r in p.procs if r is not loop and r is not target]
    workers = [r for r in rest if r.name == "pt_data_worker"]
    ranks = [r for r in rest if r.rank is not None and r not in workers]
    others = [r for r in rest if r not in workers and r not in ranks]
    if loop is not None:  # (loop: the process whose channel is read)
        out.append("training " if loop.loop else "target " if loop.rank is None else f"rank {loop.rank} ", "dim")
        out.append(safe_text(str(loop.name if isinstance(loop.name, str) else "?"), 30))
        state = loop.state if isinstance(loop.state, str) else "?"
        out.append(f" {loop.pid}  CPU {_cpu([loop])}  {_mem([loop])}  threads {value(loop.threads)}  {state}")
    if target is not None and loop is not target:
        out.append("\nlauncher ", "dim")
        out.append(safe_text(str(target.name if isinstance(target.name, str) else "?"), 30))
        out.append(f" {target.pid}  CPU {_cpu([target])}")
    for label, group in (("other ranks", ranks), ("DataLoader workers", workers), ("other subprocesses", others)):
        if group:
            out.append(f"\n{label} {len(group)}", "dim")
            out.append(f"  CPU {_cpu(group)}  {_mem(group)}")
            per = "  ".join(("" if r.rank is None else f"rank {r.rank} ") + f"{r.pid}:{r.cpu_percent:.0f}%"
                            for r in group[:6] if num(r.cpu_percent) is not None)
            out.append(f"  ({per}{' ...' if len(group) > 6 else ''})", "dim")
    if p.loop_cpu is not None:
        wait = p.loop_cpu_wait
        out.append(f"\n{'loop' if view.training is not None else 'main'} thread CPU {p.loop_cpu:.0f}%" + (f", waiting for a core {wait:.0f}%" if wait and wait >= 0.5
                                                              else ""), "dim")
    mem = memory_line(stats or view)
    if mem:
        out.append("\n" + mem)
    return out


def memory_line(view: View) -> str:
    """GPU memory: the caching allocator's numbers beside NVML's for the process, and headroom."""
    m = view.training.memory if view.training else None
    used, total = view.nvml_memory
    parts = []
    if m is not None:
        parts.append(f"GPU memory: allocated {human_bytes(m.allocated)}, reserved {human_bytes(m.reserved)}, "
                     f"peak {human_bytes(m.peak_allocated)}")
        if m.alloc_retries:
            parts.append(f"{m.alloc_retries} allocator retries (memory pressure)")
    if used is not None:
        parts.append(f"NVML {human_bytes(used)}" + (f" of {human_bytes(total)} ({human_bytes(total - used)} free)"
                                                    if total else ""))
    return " · ".join(parts)


def _cpu(rows) -> str:
    return f"{sum(r.cpu_percent for r in rows if num(r.cpu_percent) is not None):.0f}%"


def _mem(rows) -> str:
    """PSS when every process's is readable; else RSS, said as such (it counts shared pages twice)."""
    if all(r.pss is not None for r in rows):
        return f"PSS {human_bytes(sum(r.pss for r in rows))}"
    rss = sum(r.rss for r in rows if num(r.rss) is not None)
    return f"RSS {human_bytes(rss)}" + (" (shared pages counted per process)" if len(rows) > 1 else "")


def value(v) -> str:
    return "n/a" if isinstance(v, NA) else str(v)


SOURCE_NAMES = {"channel": "channel", "capture": "capture control", "process": "process sampler",
                "gpu": "NVML", "sampler": "sampler", "py-spy": "py-spy (hot lines from outside)"}


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


def capture_panel(view: View, steps: int) -> Text:
    """Which capture `c` takes, or how the current one is going, and what the last one found."""
    t, c = view.training, view.capture
    out = Text()
    if t is None or c is None:
        why = view.problems.get("capture")
        return Text(safe_text(why) if why else "captures need a live job with the probe (tuimon attach / run)",
                    "red" if why else "dim")
    kind = safe_text(t.capture_kind or "torch.profiler", 40)
    what = f"{steps} steps" if t.steps > 0 else "10 s (no steps seen)"
    if c.busy:
        out.append(f"capture {c.seq} {c.state}", "bold yellow")
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
    if c.state == "idle" and c.kind == "nsys" and c.message:
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


def explain(v: Verdict, width: int) -> Text:
    """Every rule of the diagnosis, in the order they are tried: its checks (value, threshold,
    result, where the threshold comes from) and why it fired or not. The first that fires decides."""
    out = Text()
    out.append(f" {v.headline.upper()} ", VERDICT_STYLE.get(v.code, "bold") + " reverse")
    out.append(f"  {v.confidence} confidence\n", "dim")
    out.append(safe_text(v.evidence, 400) + "\n")
    out.append("→ ", "bold")
    out.append(safe_text(v.next_step, 600) + "\n\n")
    out.append("The rules, in the order they are tried (the first that fires decides):\n", "bold")
    decided = False
    for rule in v.rules:
        mark, style = ("✓", "bold green") if rule.fired else ("·", "dim")
        if rule.fired and not decided:
            mark, decided = "▶", True
        out.append(f"\n{mark} {rule.title}", style)
        out.append(f" — {safe_text(rule.why, 300)}\n")
        for ch in rule.checks:
            res = {True: "yes", False: "no", None: "n/a"}[ch.passed]
            out.append(f"    {ch.what}: {ch.value} {ch.test}".rstrip() + f"  → {res}\n",
                       "" if ch.passed else "dim")
            if ch.source:
                out.append(f"      {safe_text(ch.source, 500)}\n", "dim")
    return out


def gpu_line(s) -> str:
    """One GPU in a line (`top --once`)."""
    name = s.name if isinstance(s.name, str) else "?"
    if s.lost is not None:
        return f"GPU {s.index} {name}: lost: {s.lost.reason}"
    if s.gpm:
        act = f"SM {pct(s.sm_active).strip()}  tensor {pct(s.tensor_active).strip()}  DRAM {pct(s.dram_bw).strip()}"
    else:
        act = f"util {pct(s.util_gpu).strip()} (coarse)  mem-ctl {pct(s.util_mem).strip()}"
    power = f"  power {s.power_w:.0f}/{s.power_limit_w:.0f} W" if num(s.power_w) is not None and num(s.power_limit_w) else ""
    temp = f"  {s.temp_c}°C" if num(s.temp_c) is not None else ""
    return f"GPU {s.index} {safe_text(name, 40)}  {act}{power}  mem {gib(s.mem_used)}/{gib(s.mem_total)} GiB{temp}"


def gpu_process_rows(s) -> list[str]:
    """A GPU's processes as table rows: PID, user, GPU memory, SM share, command."""
    procs = s.processes
    if isinstance(procs, NA):
        return [f"processes: {procs.reason}"]
    if not procs:
        return ["no processes"]
    rows = [f"{'PID':>8}  {'USER':<10}  {'GPU MEM':>9}  {'SM':>4}  COMMAND"]
    for p in procs:
        mem = f"{gib(p.gpu_mem)} GiB" if p.gpu_mem is not None else "n/a"
        sm = f"{p.sm_util}%" if p.sm_util is not None else ""
        cmd = safe_text(p.command or p.name or "(not visible: another user's, or another PID namespace)", 200)
        rows.append(f"{p.pid:>8}  {safe_text(p.user or '?', 10):<10}  {mem:>9}  {sm:>4}  {cmd}")
    return rows


def host_line(h) -> str:
    return (f"host: CPU {h.cpu_percent:.0f}% of {h.cpus} cores · memory {human_bytes(h.mem_used)} of "
            f"{human_bytes(h.mem_total)}")


def top_header(view: View, label: str, width: int = 0) -> Text:
    """GPUs, host CPU and memory, and the label where the width holds it (0: no limit)."""
    out = Text("tuimon top ", "bold")
    out.append(f"· {len(view.gpus)} GPU{'s' if len(view.gpus) != 1 else ''} ")
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
    out = Text()
    for k, g in enumerate(view.gpus):
        if k:
            out.append("\n\n")
        out.append_text(gpu_block(g, width, False, table=True))
    return out
