"""A plain-text live view: one line per interval, fit for a log or a dumb terminal; a source that
fails or recovers is said once, on a line of its own."""

from __future__ import annotations

import sys
import time

from ..analysis import thresholds as T
from ..analysis.anatomy import how_of
from ..channel.text import safe_text
from ..model import NA, Comparison, num
from ..monitor.session import LiveSession, run_cycles
from ..monitor.state import MonitorState, View


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
        for name, per_s in list(t.throughput_per_s.items())[:2]:
            parts.append(f"{per_s:,.0f} {safe_text(name, 24)}/s")
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
    from ..ui.panels.now import now_line  # (formatting only: textual is not started)

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
    from ..ui.format import peak_memory_words, vs  # (formatting only: textual is not started)

    memory = peak_memory_words(c).replace("→", "->")
    grew = c.peak_memory is not None and c.peak_memory.grew
    if c.state == "collecting":
        step = c.progress
    else:
        head = {"regression": "REGRESSION", "faster": "faster than baseline", "same": "as baseline"}[c.state]
        p = "" if c.state == "same" else ", p < 0.001" if c.p_value < 0.001 else f", p = {c.p_value:.3f}"
        step = f"{head}: mean step {vs(c.mean_ms, c.baseline_mean_ms)} ({c.ratio - 1:+.0%}{p}"
        if None not in (c.p50_ms, c.baseline_p50_ms, c.p95_ms, c.baseline_p95_ms):
            step += f"; p50 {vs(c.p50_ms, c.baseline_p50_ms)}, p95 {vs(c.p95_ms, c.baseline_p95_ms)}"
        step += ")"
        if c.gpu_grown is not None:
            step += f", the GPU's work grew {c.gpu_grown.baseline_ms:.1f} -> {c.gpu_grown.now_ms:.1f} ms"
        if c.grown is not None:
            step += f", {safe_text(c.grown.name, 24)} grew {c.grown.baseline_ms:.1f} -> {c.grown.now_ms:.1f} ms"
    if grew and c.state != "regression":  # (a regression of its own)
        words = f"REGRESSION: {memory}; step time {step}"
    else:
        words = ("baseline: " if c.state == "collecting" else "") + step + (f", {memory}" if grew else "")
    return words + notes(c)


def notes(c: Comparison) -> str:
    """Why the comparison may not be like for like, as the TUI and JSON say it."""
    return "".join(f" ({safe_text(n, 200)})" for n in c.notes)


CHANNEL_WAIT_S = 10.0  # a job tuimon started has this long to start the probe before it is said


def _why_none(reason: str) -> str:
    """Why a job tuimon started has no channel (its advice, start it with tuimon run, is moot)."""
    if "has no tuimon channel" in reason:
        return ("the probe starts with the job's Python processes: a command that runs no Python (or "
                "has not started it yet) has none; its processes and GPUs are still shown")
    return safe_text(reason, 300)


class ProblemLines:
    """Says each source's failure once when it starts, and once when it clears."""

    def __init__(self, out=sys.stderr):
        self.out, self.known = out, {}

    def update(self, view: View) -> None:
        for source, why in view.problems.items():
            if self.known.get(source) != why:
                print(f"tuimon: {source}: {safe_text(why, 500)}", file=self.out, flush=True)
        for source in set(self.known) - set(view.problems):
            print(f"tuimon: {source}: recovered", file=self.out, flush=True)
        self.known = dict(view.problems)


def follow(session: LiveSession, interval: float, until=None, out=sys.stdout, baseline=None,
           launched: bool = False, on_view=None) -> View:
    """Print a line each interval until until() is true or the process is gone; returns the last
    view (the last look at a process that ended). baseline: (file, Baseline) to compare against;
    launched: a job tuimon just started, whose channel comes once its Python starts the probe;
    on_view: also given each view (the metrics exporter's publish)."""
    state, problems = MonitorState(baseline=baseline), ProblemLines()
    said_channel, stacks_said = [False], [None]
    started = time.monotonic()

    def on_cycle(c) -> None:
        state.apply(c)
        view = state.view()
        if on_view is not None:
            on_view(view)
        problems.update(view)
        stacks = view.training.stacks if view.training is not None and view.stall and view.stall.stalled else None
        if stacks and stacks != stacks_said[0]:  # a stall: where every thread is, once per dump that changed
            stacks_said[0] = stacks
            print("\n".join(safe_text(line, 300) for line in stacks.splitlines()), file=out, flush=True)
        pending = launched and time.monotonic() - started < CHANNEL_WAIT_S
        if isinstance(view.channel, NA) and not said_channel[0] and not pending:
            why = _why_none(view.channel.reason) if launched else safe_text(view.channel.reason, 300)
            after = f" from the job after {CHANNEL_WAIT_S:g} s" if launched else ""
            print(f"tuimon: no channel{after}: {why}", file=sys.stderr, flush=True)
            said_channel[0] = True
        print(summary_line(view, channel_pending=pending), file=out, flush=True)

    def done(c) -> bool:
        gone = c.process is not None and not c.process.alive
        return gone or (until is not None and until())

    try:
        run_cycles(session, interval, on_cycle, done)
    finally:
        session.stop()
    return state.view()
