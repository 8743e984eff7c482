"""The plain-text views: `attach --once`'s and `--plain`'s line (one per interval), `top --once`'s
lines. Built from the words the panels use (format.py); no Textual."""

from __future__ import annotations

from ..analysis import thresholds as T
from ..analysis.anatomy import how_of
from ..channel.text import safe_text
from ..model import NA, Comparison, num
from ..monitor.state import View
from .format import (
    COMPARISON_WORDS,
    gpu_line,
    gpu_process_rows,
    host_line,
    p_words,
    peak_memory_words,
    throughput_words,
    vs,
)
from .panels.now import now_line


def summary_line(view: View, channel_pending: bool = False) -> str:
    """channel_pending: a job tuimon just started, whose channel has not come yet."""
    t, p = view.training, view.process
    pid = t.pid if t else p.pid if p else "?"
    parts = [f"pid {pid}"]
    if t is not None:
        parts.append(f"step {t.steps}")
        st = t.step_time_ms
        if st:  # the mean first: what the job pays per step (1 / steps per second)
            gpu = t.gpu.step_mean_ms if t.gpu is not None else None
            parts.append(f"step {st.mean:.1f} ms mean" + (f" (GPU {gpu:.1f} ms)" if gpu is not None else "")
                         + f" / {st.p50:.1f} p50 / {st.p95:.1f} p95 / {st.p99:.1f} p99")
        if view.stall is not None and view.stall.stalled:  # (its rates are those of the steps before)
            parts.append(f"no step for {view.stall.quiet_s:,.0f} s")
        elif t.steps_per_s:
            parts.append(f"{t.steps_per_s:.2f} steps/s")
        parts += throughput_words(t.throughput_per_s)
        if t.data_wait_share is not None:
            parts.append(f"data wait {t.data_wait_share:.0%}")
        top = [r for r in t.ranges if r.depth == 0][:3]
        if t.phases:  # the step's anatomy, found with no code change
            parts.append("phases " + ", ".join(f"{ph.name} {ph.share:.0%}" for ph in t.phases if ph.share >= 0.005))
        if top:  # the job's own names, where it has any
            parts.append("ranges " + ", ".join(f"{safe_text(r.name, 24)} {r.share or 0:.0%}" for r in top))
        if t.dropped or t.corrupt:
            parts.append(f"dropped {t.dropped} corrupt {t.corrupt}")
    elif isinstance(view.channel, NA):
        parts.append("waiting for its channel" if channel_pending else "no channel")
        o = view.outside
        if o is not None and o.hot_lines and o.samples >= T.HOT_MIN_SAMPLES.value:  # (sampled from outside)
            h = o.hot_lines[0]
            parts.append(f"main thread {h.share:.0%} at {safe_text(h.line, 120)} ({how_of(h)[0]})")
    if p is not None and p.alive:
        parts.append(f"CPU {p.cpu_percent or 0:.0f}%")
    busy = [num(g.latest.sm_active) for g in view.gpus if g.latest.index in view.target_gpus]
    if any(b is not None for b in busy):
        parts.append("SM " + "/".join(f"{b:.0f}%" for b in busy if b is not None))
    if view.verdict.code != "waiting":
        parts.append(f"verdict: {view.verdict.headline}")
    if view.verdict.code in ("stalled", "exited"):
        parts.append(safe_text(view.verdict.evidence, 400))
    now = now_line(view).plain
    if now:
        parts.append(now)
    if view.baseline is not None:
        parts.append(baseline_words(view.baseline))
    if len(view.ranks) > 1:
        parts.append("ranks " + ", ".join(
            f"{r.rank}: {r.step_p50_ms or 0:.1f} ms own {r.own_ms or 0:.1f} comm {r.comm_share or 0:.0%}"
            + ("" if r.state == "alive" else " exited") for r in view.ranks))
    state = t.state if t else ("alive" if p is not None and p.alive else "exited")
    if state != "alive":
        parts.append(f"[process {state}]")
    return " | ".join(parts)


def baseline_words(c: Comparison) -> str:
    """The comparison with a baseline in a few words: 'REGRESSION: mean step 161.1 ms vs 80.8 ...'."""
    memory = peak_memory_words(c).replace("→", "->")
    grew = c.peak_memory is not None and c.peak_memory.grew
    if c.state == "collecting":
        step = c.progress
    else:
        assert c.ratio is not None and c.mean_ms is not None and c.baseline_mean_ms is not None  # (decided: set)
        step = f"{COMPARISON_WORDS[c.state]}: mean step {vs(c.mean_ms, c.baseline_mean_ms)} ({c.ratio - 1:+.0%}{p_words(c)}"
        if (c.p50_ms is not None and c.baseline_p50_ms is not None and c.p95_ms is not None
                and c.baseline_p95_ms is not None):
            step += f"; p50 {vs(c.p50_ms, c.baseline_p50_ms)}, p95 {vs(c.p95_ms, c.baseline_p95_ms)}"
        step += ")"
        if c.gpu_grown is not None:
            step += f", the GPU's work grew {c.gpu_grown.baseline_ms:.1f} -> {c.gpu_grown.now_ms:.1f} ms"
        if c.grown is not None:
            step += f", {safe_text(c.grown.name, 24)} grew {c.grown.baseline_ms:.1f} -> {c.grown.now_ms:.1f} ms"
    if c.halted is not None:  # (no progress: a regression whatever the steps before it said)
        words = f"{COMPARISON_WORDS['regression']}: no progress: {safe_text(c.halted, 200)}; step time {step}"
    elif grew and c.state != "regression":  # (a regression of its own)
        words = f"{COMPARISON_WORDS['regression']}: {memory}; step time {step}"
    else:
        words = (f"{COMPARISON_WORDS['collecting']}: " if c.state == "collecting" else "") + step + (f", {memory}" if grew else "")
    return words + notes(c)


def notes(c: Comparison) -> str:
    """Why the comparison may not be like for like, as the TUI and JSON say it."""
    return "".join(f" ({safe_text(n, 200)})" for n in c.notes)


def top_text(view: View) -> str:
    """All GPUs and their processes, and the host, as plain text (`top --once`)."""
    lines = []
    if not view.gpus or "gpu" in view.problems:
        lines.append(f"{'no GPU data: ' if not view.gpus else ''}{view.problems.get('gpu', 'NVML found no GPU')}")
    for g in view.gpus:
        lines.append(gpu_line(g.latest))
        lines += ["  " + row for row in gpu_process_rows(g.latest)]
    if view.host is not None:
        lines.append(host_line(view.host))
    return "\n".join(lines)
