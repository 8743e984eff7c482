"""One GPU in detail: its numbers and longer histories."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from ...channel.text import safe_text
from ...model import num
from ...monitor.state import GpuView, View
from ..panels.gpus import gpu_block
from ..widgets import Keys, Panel
from .base import ViewScreen


class GpuScreen(ViewScreen):
    BINDINGS = [Binding("escape,g", "app.pop_screen", "back"), Binding("n", "next_gpu", "next GPU")]

    def __init__(self) -> None:
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
            self.index = ((self.index or 0) + 1) % len(self._view.gpus)  # (set by the first view with GPUs)
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
        summary.show(gpu_block(g, summary.text_width, g.latest.index in view.target_gpus))
        plot = self.query_one("#gpu-plot", Panel)
        plot.show(gpu_history_plot(g, max(40, plot.text_width - 1), max(12, self.app.size.height - 14),
                                   color=not self.app.no_color))


def no_gpu_words(view: View) -> str:
    """Why there is no GPU to show: NVML's own words where it failed."""
    if "gpu" in view.problems:
        return f"no GPU data: {safe_text(view.problems['gpu'], 300)}"
    return view.gpu_note or "no GPU data yet: NVML has not answered (its first read can take a few seconds)"


def gpu_history_plot(g: GpuView, width: int, height: int, color: bool = True) -> Text:
    """Longer histories as a plotext line chart (0-100%). color=False (NO_COLOR: Textual reads and
    removes it from the environment at start-up, so ask the app) draws it in plain text."""
    import plotext as plt

    h = g.history
    limit = num(g.latest.power_limit_w)
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
