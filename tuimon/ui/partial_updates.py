"""Cell-precise partial updates: the bytes a changed number costs over SSH.

Textual's ChopsUpdate writes a dirty span from the left edge of the widget's piece of the line
("chop") to the span's end: it crops chops on the right only (a TODO in its source). With panels
that mark only their changed cells dirty (widgets.Panel), that re-sends the whole line left of a
changed number. install() gives ChopsUpdate a render_segments that crops both sides, so a
changed cell costs that cell, and a style is sent only where it changes (not set and reset around
every segment). It replaces the method only where ChopsUpdate has the shape it was
written against (textual 0.80 to 8.x: chops, spans, chop_ends); elsewhere Textual's own stays,
and the screen is the same, only larger updates are sent."""

from __future__ import annotations

import inspect

from rich.color import ColorSystem
from rich.control import Control
from textual.strip import Strip


def _render_segments(self, console) -> str:
    move_to = Control.move_to
    out: list[str] = []
    sgr: str | None = None  # the terminal's graphics state as this update left it (None: unknown)
    color_system = console._color_system or ColorSystem.TRUECOLOR
    for y, x1, x2 in self.spans:
        for end, (x, strip) in zip(self.chop_ends[y], self.chops[y].items(), strict=False):
            if strip is None or x >= x2 or end <= x1:
                continue
            left, right = max(x, x1), min(end, x2)
            piece = strip if (left, right) == (x, end) else strip.crop(left - x, right - x)
            out.append(move_to(left, y).segment.text)  # every piece is placed: no newlines needed
            sgr = _styled(piece, color_system, sgr, out)
    if sgr:
        out.append("\x1b[0m")
    return "".join(out)


def _styled(piece, color_system, sgr: str | None, out: list[str]) -> str | None:
    """The piece's segments, each style set only where it differs from the one in force: a cursor
    move keeps the graphics state, so neighbouring changes in one style (a number in the header,
    then the next) send it once, and no reset after each (Strip.render sends both every segment:
    ~20 of the ~25 bytes a changed digit cost). Returns the state it leaves."""
    for text, style, _ in piece:
        if style is not None and style._link:  # (a hyperlink's own sequences: Textual's rendering,
            if sgr != "":  # which sets its style on top of the state in force: reset that first)
                out.append("\x1b[0m")
            out.append(Strip.render_style(style, text, color_system))
            sgr = ""  # (it ends reset)
            continue
        ansi = "" if style is None else (style._ansi if style._ansi is not None else Strip.render_ansi(style, color_system))
        if ansi != sgr:
            out.append(f"\x1b[0;{ansi}m" if ansi else "\x1b[0m")
            sgr = ansi
        out.append(text)
    return sgr


def install() -> bool:
    """Whether the cropping renderer is in use."""
    try:
        from textual._compositor import ChopsUpdate
    except ImportError:
        return False
    if getattr(ChopsUpdate, "_tuimon_cropped", False):
        return True
    params = list(inspect.signature(ChopsUpdate.__init__).parameters)
    if params != ["self", "chops", "spans", "chop_ends"] or not hasattr(ChopsUpdate, "render_segments") or not (
            hasattr(Strip, "render_ansi") and hasattr(Strip, "render_style")):
        return False
    ChopsUpdate.render_segments = _render_segments  # type: ignore[method-assign]  # (the patch itself)
    ChopsUpdate._tuimon_cropped = True  # type: ignore[attr-defined]
    return True
