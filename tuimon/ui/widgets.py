"""Panels: Static widgets that repaint only when their text changed."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class Panel(Static):
    def __init__(self, title: str = "", **kw):
        super().__init__("", markup=False, **kw)
        self._last: Text | None = None
        self._drawn_width = 0
        if title:
            self.border_title = title

    @property
    def text_width(self) -> int:
        w = self.content_size.width
        return w if w > 0 else max(20, self.app.size.width - 4)

    def on_resize(self, event) -> None:
        # The text was laid out for another width (e.g. before the body's scrollbar appeared):
        # lay it out again now rather than at the next sample, which a paused or finished view
        # never gets.
        if self._last is not None and self.content_size.width != self._drawn_width:
            redraw = getattr(self.app, "redraw", None)
            if redraw is not None:
                self.call_after_refresh(redraw)

    def show(self, text: Text) -> None:
        self._drawn_width = self.content_size.width
        if text != self._last:  # unchanged text: no repaint, no bytes to the terminal
            self._last = text
            self.update(text)
