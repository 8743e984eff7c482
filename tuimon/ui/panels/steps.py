"""Step time: the host's and the GPU's, as sparklines and window statistics."""

from __future__ import annotations

from rich.text import Text

from ...channel.text import safe_text
from ...model import NA
from ...monitor.state import View
from ..format import STEP_SOURCE_WORDS, spark


def steps_panel(view: View, width: int, window: View | None = None) -> Text:
    """Step time: sparklines from view, the statistics from the window view (default: view)."""
    if view.training is None:
        return no_channel_text(view)
    t = (window or view).training or view.training
    st = t.step_time_ms
    if not st:
        return Text("no steps yet (a step ends at the loop's optimizer.step(), else at its backward(), its model "
                    "call or its DataLoader's next())", "dim")
    out = Text()
    source = "" if t.step_source in (None, "optimizer") else f"; a step: {STEP_SOURCE_WORDS.get(t.step_source, t.step_source)}"
    host_stats = f" mean {st.mean:.1f}  p50 {st.p50:.1f}  p95 {st.p95:.1f}  p99 {st.p99:.1f} ms  (last {t.window_steps} steps{source})"
    g = t.gpu
    gpu_stats = ""
    if g is not None:
        times = ([f"mean {g.step_mean_ms:.1f}"] if g.step_mean_ms is not None else []) + \
            ([f"p50 {g.step_ms:.1f}"] if g.step_ms is not None else [])
        gpu_stats = (f" {'  '.join(times)} ms" if times else " n/a") + f" · busy >= {g.busy_share:.0%}"
        if g.lag_ms is not None:
            gpu_stats += f" · {g.lag_ms:.1f} ms queued at step end"
    series = view.step_columns or view.step_ms
    spark_w = max(8, width - max(len(host_stats), len(gpu_stats)) - 6)
    hi = max([v for v in series[-spark_w:] if v is not None] + [v for v in view.gpu_step_columns[-spark_w:]
                                                                 if v is not None] or [1.0])
    out.append("host ", "dim")
    out.append(spark(series, spark_w, hi=hi), "cyan")
    out.append(host_stats)
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
