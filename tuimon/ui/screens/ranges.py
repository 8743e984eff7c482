"""Every range of the job with its count, mean, p95 and share."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Static

from ...channel.text import safe_text
from ...model import RangeRow
from ...monitor.state import View
from ..widgets import Keys
from .base import ViewScreen

NO_RANGES = Text("None yet: the job's own ranges appear here (with tuimon.range(\"name\"), nvtx.annotate or "
                 "torch.cuda.nvtx.range in its code).", "dim")


SORT_KEYS = [("share", "share"), ("count", "count"), ("mean_ms", "mean ms"), ("p95_ms", "p95 ms"), ("name", "name")]


class RangesScreen(ViewScreen):
    BINDINGS = [Binding("escape,r", "app.pop_screen", "back"), Binding("s", "next_sort", "sort")]

    def __init__(self) -> None:
        super().__init__()
        self.sort = 0
        self._rows: list[RangeRow] | None = None  # None: not filled yet (an empty list is a real answer)

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
