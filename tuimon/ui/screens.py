"""The screens: main ("is my GPU busy, and if not, why?"), ranges, GPU detail, help."""

from __future__ import annotations

import os
import time

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Static

from ..capture.client import window_steps
from ..channel.text import safe_text
from ..monitor.state import COLUMN_S, View
from . import render
from .widgets import Keys, Panel


class MainScreen(Screen):
    def compose(self) -> ComposeResult:
        yield Panel(id="header")
        yield Panel(id="status")
        yield Panel(id="verdict")
        yield Panel(id="now")
        yield Panel(id="ended")
        yield Panel(id="baseline")
        # Section titles are their own widgets and panels have no border: a panel that changes
        # is redrawn whole, and borders would be resent with it every second.
        with VerticalScroll(id="body"):
            yield Static(Text("Ranks · * in detail below · n: next rank", "bold"), classes="title", id="ranks-title")
            yield Panel(id="ranks", classes="box")
            for wid, title in (("gpus", f"GPUs · a column is {COLUMN_S} s"),
                               ("steps", f"Step time · a column is the mean of {COLUMN_S} s"),
                               ("breakdown", "Where the step goes"), ("process", "Process"), ("capture", "Capture")):
                yield Static(Text(title, "bold"), classes="title")
                yield Panel(id=wid, classes="box")
        yield Keys()

    _slow: View | None = None
    _slow_at = 0.0
    _verdict_for: tuple | None = None  # (verdict, width) the verdict panel shows

    def _window_view(self, view: View) -> View:
        """The view the window statistics are drawn from: renewed every SLOW_S, or at once when
        the verdict or the training's presence changes. Statistics over the last 100 steps move
        slowly, and each redraw is bytes to the terminal; live numbers use the newest view."""
        now, slow = time.monotonic(), self._slow
        if (slow is None or now - self._slow_at >= SLOW_S or slow.verdict.code != view.verdict.code
                or (slow.training is None) != (view.training is None) or slow.paused != view.paused
                or _baseline_state(slow) != _baseline_state(view)):
            self._slow, self._slow_at = view, now
        return self._slow

    def show_view(self, view: View, label: str) -> None:
        q = self.query_one
        slow = self._window_view(view)
        head = q("#header", Panel)
        head.show(render.header(view, label, rates=slow, width=head.text_width))
        status, line = render.status_line(view), q("#status", Panel)
        if line.display != bool(status):
            line.display = bool(status)  # (a change of display lays the screen out again)
        line.show(status)
        verdict = q("#verdict", Panel)
        shown = self._verdict_for
        if shown is None or shown[0] is not slow.verdict or shown[1] != verdict.text_width:  # (fitted to the width)
            self._verdict_for = (slow.verdict, verdict.text_width)
            verdict.show(render.verdict_line(slow.verdict, verdict.text_width))
        now = q("#now", Panel)
        line = render.now_line(view, now.text_width)
        if now.display != bool(line):
            now.display = bool(line)
        now.show(line)
        ended, words = q("#ended", Panel), render.ended_panel(view)
        if ended.display != bool(words):
            ended.display = bool(words)
        ended.show(words)
        base = q("#baseline", Panel)
        if base.display != (slow.baseline is not None):
            base.display = slow.baseline is not None
        if slow.baseline is not None:  # (while collecting, its progress as it goes)
            shown = view.baseline if view.baseline is not None and view.baseline.state == "collecting" else slow.baseline
            base.show(render.baseline_panel(shown, base.text_width))
        ranks = q("#ranks", Panel)
        if ranks.display != (len(slow.ranks) > 1):
            ranks.display = q("#ranks-title", Static).display = len(slow.ranks) > 1
        if len(slow.ranks) > 1:
            ranks.show(render.ranks_panel(slow, ranks.text_width, view.training.pid if view.training else None))
        gpus = q("#gpus", Panel)
        gpus.show(render.gpus_panel(view, gpus.text_width))
        steps = q("#steps", Panel)
        steps.show(render.steps_panel(view, steps.text_width, stats=slow))
        bd = q("#breakdown", Panel)
        bd.show(render.breakdown_panel(slow, bd.text_width, plain=self.app.no_color))
        q("#process", Panel).show(render.process_panel(view, stats=slow))
        q("#capture", Panel).show(render.capture_panel(view, self.app.capture_steps))


def _baseline_state(view: View) -> tuple | None:
    return (view.baseline.state, view.baseline.regressed) if view.baseline is not None else None


SLOW_S = COLUMN_S  # window statistics are redrawn this often (or at once when the verdict changes)


NO_RANGES = Text("None yet: the job's own ranges appear here (with tuimon.range(\"name\"), nvtx.annotate or "
                 "torch.cuda.nvtx.range in its code).", "dim")
SORT_KEYS = [("share", "share"), ("count", "count"), ("mean_ms", "mean ms"), ("p95_ms", "p95 ms"), ("name", "name")]


class RangesScreen(Screen):
    BINDINGS = [Binding("escape,r", "app.pop_screen", "back"), Binding("s", "next_sort", "sort")]

    def __init__(self):
        super().__init__()
        self.sort = 0
        self._rows: list[dict] | None = None  # None: not filled yet (an empty list is a real answer)

    def compose(self) -> ComposeResult:
        yield Static(id="ranges-title")
        none = Static(NO_RANGES, id="ranges-none")
        none.styles.padding = (0, 1)  # (as the title's leading space, on every line it wraps to)
        yield none
        yield DataTable(id="ranges", cursor_type="row", zebra_stripes=True)
        yield Keys()

    def on_mount(self) -> None:
        t = self.query_one(DataTable)
        for label in ("range", "depth", "count", "mean ms", "p95 ms", "share"):
            t.add_column(label, key=label)

    def action_next_sort(self) -> None:
        self.sort = (self.sort + 1) % len(SORT_KEYS)
        if self._rows is not None:
            self._fill()

    def show_view(self, view: View, label: str) -> None:
        rows = view.training.ranges if view.training else []
        if rows != self._rows:
            self._rows = rows
            self._fill()

    def _fill(self) -> None:
        key, label = SORT_KEYS[self.sort]
        rows = sorted(self._rows or [], key=lambda r: (getattr(r, key) is None, getattr(r, key)), reverse=key != "name")
        self.query_one("#ranges-title", Static).update(
            Text(f" Ranges over the last steps, sorted by {label} (s: next sort, esc: back)", "bold"))
        self.query_one("#ranges-none", Static).display = not rows  # (on lines of its own: it wraps, never cut)
        t = self.query_one(DataTable)
        t.clear()
        for r in rows:
            name = Text("  " * r.depth + safe_text(str(r.name), 80))
            share = f"{r.share:.1%}" if r.share is not None else "n/a"
            t.add_row(name, str(r.depth), f"{r.count:,}", f"{r.mean_ms:.3f}", f"{r.p95_ms:.3f}", share)


class GpuScreen(Screen):
    BINDINGS = [Binding("escape,g", "app.pop_screen", "back"), Binding("n", "next_gpu", "next GPU")]

    def __init__(self):
        super().__init__()
        self.index: int | None = None  # set at the first view: the target's first GPU
        self._view: View | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="gpu-title", classes="title")
            yield Panel(id="gpu-summary", classes="box")
            yield Panel(id="gpu-plot")
        yield Keys()

    def action_next_gpu(self) -> None:
        if self._view and self._view.gpus:
            self.index = (self.index + 1) % len(self._view.gpus)
            self.show_view(self._view, "")

    def show_view(self, view: View, label: str) -> None:
        self._view = view
        if not view.gpus:
            self.query_one("#gpu-title", Static).update(Text("GPU detail (esc: back)", "bold"))
            self.query_one("#gpu-summary", Panel).show(Text(no_gpu_words(view), "dim"))
            return
        if self.index is None:
            self.index = next((i for i, g in enumerate(view.gpus) if g.latest.index in view.target_gpus), 0)
        g = view.gpus[self.index % len(view.gpus)]
        summary = self.query_one("#gpu-summary", Panel)
        self.query_one("#gpu-title", Static).update(
            Text(f"GPU {g.latest.index} of {len(view.gpus)} (n: next GPU, esc: back)", "bold"))
        summary.show(render.gpu_block(g, summary.text_width, g.latest.index in view.target_gpus))
        plot = self.query_one("#gpu-plot", Panel)
        plot.show(gpu_history_plot(g, max(40, plot.text_width - 1), max(12, self.app.size.height - 14),
                                   color=not self.app.no_color))


def no_gpu_words(view: View) -> str:
    """Why there is no GPU to show: NVML's own words where it failed."""
    if "gpu" in view.problems:
        return f"no GPU data: {safe_text(view.problems['gpu'], 300)}"
    return view.gpu_note or "no GPU data yet: NVML has not answered (its first read can take a few seconds)"


def gpu_history_plot(g, width: int, height: int, color: bool = True) -> Text:
    """Longer histories as a plotext line chart (0-100%). color=False (NO_COLOR: Textual reads and
    removes it from the environment at start-up, so ask the app) draws it in plain text."""
    import plotext as plt

    h = g.history
    limit = render.num(g.latest.power_limit_w)
    series = [("SM active", h["sm_active"]), ("Tensor", h["tensor_active"]), ("DRAM bw", h["dram_bw"])] \
        if g.latest.gpm else [("GPU util (coarse)", h["util_gpu"]), ("Mem-ctl util (coarse)", h["util_mem"])]
    if limit:
        series.append(("Power % of limit", [None if v is None else 100 * v / limit for v in h["power_w"]]))
    plt.clear_figure()
    plt.limitsize(False, False)  # plotext caps a plot at the size of the terminal it finds itself on, if any
    plt.plotsize(width, height)
    plt.theme("pro" if color else "clear")
    n = max((len(v) for _, v in series), default=0)
    for name, vals in series:
        pts = [(i - n + 1, v) for i, v in enumerate(vals) if v is not None]
        if pts:
            plt.plot([p[0] for p in pts], [p[1] for p in pts], label=name)
    plt.ylim(0, 100)
    if n > 1:  # whole samples on the axis (plotext's own ticks are fractions: "-18.8 samples ago")
        ticks = sorted({-round(k * (n - 1) / 4) for k in range(5)})
        plt.xticks(ticks, [str(-x) for x in ticks])
    plt.xlabel("samples ago")
    plt.title("% over the last samples (SM, tensor, DRAM bandwidth, power of its limit)")
    return Text.from_ansi(plt.build(), no_wrap=True, overflow="crop")


class CapturesScreen(Screen):
    """The captures of this session, newest first, with what the newest found."""

    BINDINGS = [Binding("escape,l", "app.pop_screen", "back")]

    def compose(self) -> ComposeResult:
        yield Static(Text(" Captures of this session (esc: back)", "bold"))
        yield DataTable(id="captures", cursor_type="row")
        yield Panel(id="capture-summary", classes="box")
        yield Keys()

    def on_mount(self) -> None:
        t = self.query_one(DataTable)
        for label in ("#", "kind", "state", "steps", "file", "message"):
            t.add_column(label, key=label)

    def show_view(self, view: View, label: str) -> None:
        t = self.query_one(DataTable)
        t.clear()
        for c in reversed(view.captures):
            t.add_row(str(c.seq), c.kind, c.state,
                      window_steps(c.state, c.first_step, c.last_step).removeprefix("steps "),
                      Text(safe_text(os.path.basename((c.summary.file if c.summary else None) or c.path), 60)),
                      Text(safe_text(c.message, 60)))
        done = [c for c in view.captures if c.summary]
        if done:
            s = done[-1].summary
            lines = ([s.file or ""] + ([s.error] if s.error else []) + s.lines)
        else:
            lines = ["no finished capture yet (c on the main screen)"]
        self.query_one("#capture-summary", Panel).show(Text("\n".join(safe_text(str(x), 120) for x in lines)))


class HotLinesScreen(Screen):
    """Where the loop thread's time goes, line by line, per phase (the probe's sampler)."""

    BINDINGS = [Binding("escape,h", "app.pop_screen", "back")]

    def compose(self) -> ComposeResult:
        yield Static(Text(" Hot lines of the loop thread, per phase (esc: back)", "bold"), id="hot-title")
        with VerticalScroll():
            yield Panel(id="hot", classes="box")
        yield Keys()

    def show_view(self, view: View, label: str) -> None:
        if view.training is None and view.outside is not None:  # (no probe: sampled from outside)
            self.query_one("#hot-title", Static).update(
                Text(" Hot lines of the main thread, sampled from outside (esc: back)", "bold"))
        panel = self.query_one("#hot", Panel)
        panel.show(render.hot_lines_text(view, panel.text_width))


class StacksScreen(Screen):
    """Every thread's stack in the training process, as py-spy dump prints them: asked for when
    the loop stalls, or now with t."""

    BINDINGS = [Binding("escape", "app.pop_screen", "back"), Binding("t", "again", "ask again")]

    def compose(self) -> ComposeResult:
        yield Static(Text(" Threads of the training process (t: read them again, esc: back)", "bold"))
        with VerticalScroll():
            yield Panel(id="stacks", classes="box")
        yield Keys()

    def action_again(self) -> None:
        self.app.action_stacks()

    def show_view(self, view: View, label: str) -> None:
        t = view.training
        panel = self.query_one("#stacks", Panel)
        if t is None:
            panel.show(Text("no channel: the threads' stacks need the probe (tuimon run)", "dim"))
        elif t.stacks is None:
            panel.show(Text("no stacks read yet: tuimon asks for them when the loop stalls (t: now); the probe "
                            "answers within a second", "dim"))
        else:
            out = Text(f"read {render.seconds(t.stacks_age_s or 0)} ago\n\n", "dim")
            out.append("\n".join(safe_text(line, 300) for line in t.stacks.splitlines()))
            panel.show(out)


class ExplainScreen(Screen):
    """Why the verdict says what it says: every rule, its numbers and thresholds."""

    BINDINGS = [Binding("escape,e", "app.pop_screen", "back")]

    def compose(self) -> ComposeResult:
        yield Static(Text(" The verdict, explained (esc: back)", "bold"))
        with VerticalScroll():
            yield Panel(id="explain", classes="box")
        yield Keys()

    def show_view(self, view: View, label: str) -> None:
        panel = self.query_one("#explain", Panel)
        panel.show(render.explain(view.verdict, panel.text_width))


class TopScreen(Screen):
    """`tuimon top`: every GPU with its processes (user, memory, SM share, command), and the host."""

    def compose(self) -> ComposeResult:
        yield Panel(id="header")
        with VerticalScroll(id="body"):
            yield Panel(id="gpus", classes="box")
        yield Keys()

    def show_view(self, view: View, label: str) -> None:
        head = self.query_one("#header", Panel)
        head.show(render.top_header(view, label, head.text_width))
        gpus = self.query_one("#gpus", Panel)
        gpus.show(render.top_panel(view, gpus.text_width))


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q", "app.pop_screen", "close")]

    def __init__(self, quit_stops_job: bool = False, top: bool = False):
        super().__init__()
        self.quit_stops_job, self.top = quit_stops_job, top

    TRAINING = """tuimon keys

  e    the verdict explained: every rule, its numbers and thresholds
  r    ranges: every range with count, mean, p95 and share (s: sort)
  g    GPU detail: longer histories (n: next GPU)
  p    pause / resume the display (sampling goes on)
  c    capture window: N steps (+/- change N) or 10 s without steps,
       with nsys under `tuimon run --nsys`, torch.profiler otherwise
  l    captures of this session and what the last one found
  h    hot lines: where the loop thread's time goes, line by line
  t    threads: every thread's stack in the training process (asked
       for by itself when the loop stalls)
  ?    this help
  q    {quit}  (also Ctrl-C)

The verdict (e explains it): exited, stalled, straggler, input-bound,
comm-bound, GPU memory-/compute-bound, healthy, CPU-bound, sync-bound,
host-bound, or no single bottleneck; each with the numbers that decided
it and a next step. "now" under it is the step in progress. "coarse"
marks GPUs without GPM, where only kernel-busy time is known."""

    TOP = """tuimon top keys

  g    GPU detail: longer histories (n: next GPU)
  p    pause / resume the display (sampling goes on)
  ?    this help
  q    quit  (also Ctrl-C)

Every GPU with its processes (PID, user, GPU memory, SM share, command)
and the host's CPU and memory. For one training job's steps, phases and
verdict: tuimon attach PID, or tuimon run -- COMMAND. "coarse" marks GPUs
without GPM, where only kernel-busy time is known."""

    def compose(self) -> ComposeResult:
        quit = "quit and stop the demo job" if self.quit_stops_job else "quit (the training process goes on)"
        yield Static(Text(self.TOP if self.top else self.TRAINING.format(quit=quit)), id="help")
