"""Cell-precise partial updates: the bytes a changed number costs over SSH.

Textual's ChopsUpdate writes a dirty span from the left edge of the widget's piece of the line
("chop") to the span's end: it crops chops on the right only (a TODO in its source). With panels
that mark only their changed cells dirty (widgets.Panel), that re-sends the whole line left of a
changed number. install() gives ChopsUpdate a render_segments that crops both sides, so a
changed cell costs that cell. It replaces the method only where ChopsUpdate has the shape it was
written against (textual 0.80 to 8.x: chops, spans, chop_ends); elsewhere Textual's own stays,
and the screen is the same, only larger updates are sent."""

from __future__ import annotations

import inspect

from rich.control import Control


def _render_segments(self, console) -> str:
    move_to = Control.move_to
    out: list[str] = []
    for y, x1, x2 in self.spans:
        for end, (x, strip) in zip(self.chop_ends[y], self.chops[y].items(), strict=False):
            if strip is None or x >= x2 or end <= x1:
                continue
            left, right = max(x, x1), min(end, x2)
            piece = strip if (left, right) == (x, end) else strip.crop(left - x, right - x)
            out.append(move_to(left, y).segment.text)  # every piece is placed: no newlines needed
            out.append(piece.render(console))
    return "".join(out)


def install() -> bool:
    """Whether the cropping renderer is in use."""
    try:
        from textual._compositor import ChopsUpdate
    except ImportError:
        return False
    if getattr(ChopsUpdate, "_tuimon_cropped", False):
        return True
    params = list(inspect.signature(ChopsUpdate.__init__).parameters)
    if params != ["self", "chops", "spans", "chop_ends"] or not hasattr(ChopsUpdate, "render_segments"):
        return False
    ChopsUpdate.render_segments = _render_segments  # type: ignore[method-assign]  # (the patch itself)
    ChopsUpdate._tuimon_cropped = True  # type: ignore[attr-defined]
    return True
