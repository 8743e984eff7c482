"""Panels: Static widgets that repaint only when their text changed."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class Panel(Static):
    def __init__(self, title: str = "", **kw):
        super().__init__("", markup=False, **kw)
        self._last: Text | None = None
        if title:
            self.border_title = title

    @property
    def text_width(self) -> int:
        w = self.content_size.width
        return w if w > 0 else max(20, self.app.size.width - 4)

    def show(self, text: Text) -> None:
        if text != self._last:  # unchanged text: no repaint, no bytes to the terminal
            self._last = text
            self.update(text)
