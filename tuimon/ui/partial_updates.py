"""Cell-precise partial updates: the bytes a changed number costs over SSH.

Textual's ChopsUpdate writes a dirty span from the left edge of the widget's piece of the line
("chop") to the span's end: it crops chops on the right only (a TODO in its source). With panels
that mark only their changed cells dirty (widgets.Panel), that re-sends the whole line left of a
changed number. install() gives ChopsUpdate a render_segments that crops both sides, so a
changed cell costs that cell, and a style is sent only where it changes (not set and reset around
every segment), without the default colours a reset already sets (39, 49), and a piece further
along the line after plain ASCII text is reached by a move right (ESC[nC, 4 bytes) rather than
placed (ESC[row;colH, 7-8). It replaces the method only where ChopsUpdate has the shape it was
written against (textual 0.80 to 8.x: chops, spans, chop_ends); elsewhere Textual's own stays,
and the screen is the same, only larger updates are sent.

It also gives the Compositor a render_partial_update that renders only the lines an update sends.
Textual's renders every widget that overlaps the box around all dirty regions, each over its whole
height, and then keeps only the dirty lines: with the header (top) and a panel (bottom) changed,
that is every line of every visible widget, ~15 widgets, most of a refresh's cost. This one
renders a widget only over the dirty rows where some cell of it is not already covered by a
widget in front (its first to its last such row): a panel its changed lines, the screen and the
scrolling body behind the panels nothing. Each sent cell comes from the same widget as before
(the frontmost there), so the update is the same."""

from __future__ import annotations

import inspect
from bisect import bisect_left
from typing import TYPE_CHECKING

from rich.color import ColorSystem
from rich.control import Control
from textual.geometry import Region
from textual.strip import Strip

if TYPE_CHECKING:
    from rich.console import Console
    from textual._compositor import ChopsUpdate, Compositor


def _render_segments(self: ChopsUpdate, console: Console) -> str:
    move_to = Control.move_to
    out: list[str] = []
    sgr: str | None = None  # the terminal's graphics state as this update left it (None: unknown)
    color_system = console._color_system or ColorSystem.TRUECOLOR
    cx = cy = -1  # the terminal's cursor where this update knows it (after plain ASCII text), else -1
    for y, x1, x2 in self.spans:
        ends = self.chop_ends[y]
        for end, (x, strip) in zip(ends, self.chops[y].items(), strict=False):
            if strip is None or x >= x2 or end <= x1:
                continue
            left, right = max(x, x1), min(end, x2)
            piece = strip if (left, right) == (x, end) else strip.crop(left - x, right - x)
            if y == cy and left >= cx >= 0:  # further along the line it is on: a move right, or none
                if left > cx:
                    out.append(f"\x1b[{left - cx}C")
            else:
                out.append(move_to(left, y).segment.text)  # every piece is placed: no newlines needed
            sgr = _styled(piece, color_system, sgr, out)
            # (at the line's last column a terminal waits to wrap: no relative move from there)
            cx, cy = (right, y) if right < ends[-1] and _plain_width(piece) == right - left else (-1, -1)
    if sgr:
        out.append("\x1b[0m")
    return "".join(out)


def _plain_width(piece: Strip) -> int:
    """The cells the piece's text moves a terminal's cursor, where that is certain (printable ASCII,
    no links, no control segments: one cell a character in any terminal), else -1."""
    n = 0
    for text, style, control in piece:
        if control or not (text.isascii() and text.isprintable()) or (style is not None and style._link):
            return -1
        n += len(text)
    return n


_AFTER_RESET: dict[str, str] = {}


def _after_reset(ansi: str) -> str:
    """SGR parameters as written after a reset (0): without the default colours (39, 49), which
    the reset sets already (a colour's own parameters, 38;5;39 say, kept whole)."""
    got = _AFTER_RESET.get(ansi)
    if got is None:
        codes, keep, k = ansi.split(";") if ansi else [], [], 0
        while k < len(codes):
            c = codes[k]
            n = 1
            if c in ("38", "48", "58") and k + 1 < len(codes):
                n = 3 if codes[k + 1] == "5" else 5 if codes[k + 1] == "2" else 1
            if n > 1 or c not in ("39", "49"):
                keep.extend(codes[k:k + n])
            k += n
        if len(_AFTER_RESET) > 4096:  # (styles are few; a bound all the same)
            _AFTER_RESET.clear()
        got = _AFTER_RESET[ansi] = ";".join(keep)
    return got


def _styled(piece: Strip, color_system: ColorSystem, sgr: str | None, out: list[str]) -> str | None:
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
        ansi = "" if style is None else _after_reset(
            style._ansi if style._ansi is not None else Strip.render_ansi(style, color_system))
        if ansi != sgr:  # (from the reset state itself, no second reset)
            out.append(f"\x1b[{ansi}m" if sgr == "" else f"\x1b[0;{ansi}m" if ansi else "\x1b[0m")
            sgr = ansi
        out.append(text)
    return sgr


def _render_partial_update(self: Compositor) -> ChopsUpdate | None:
    from textual._compositor import ChopsUpdate  # noqa: F811  # (imported where installed)

    update_regions = self._dirty_regions.copy()
    self._dirty_regions.clear()
    if not update_regions:
        return None
    spans = list(self._regions_to_spans(update_regions))
    height = self.size.height
    rows = sorted({y for y, _, _ in spans if 0 <= y < height})
    cuts = self.cuts
    chops: list[dict[int, Strip | None]] = [dict.fromkeys(cut_set[:-1]) for cut_set in cuts]
    if rows:
        crop = Region.from_union(update_regions).intersection(self.size.region)
        crop_overlaps, intersection = crop.overlaps, Region.intersection
        for widget, (region, clip) in self.visible_widgets.items():  # (front to back: the first strip of a cut wins)
            if not crop_overlaps(clip):
                continue
            x, y, width, h = intersection(region, clip)
            if not (width and h):
                continue
            end = x + width
            # its rows that are sent and still have a cut that no widget in front of it filled
            need = [row for row in rows[bisect_left(rows, y):bisect_left(rows, y + h)]
                    if any(chops[row].get(cut, 0) is None for cut in cuts[row] if x <= cut < end)]
            if not need:
                continue
            top, bottom = need[0], need[-1] + 1
            strips = widget.render_lines(Region(x - region.x, top - region.y, width, bottom - top))
            wanted = set(need)
            for row, strip in zip(range(top, bottom), strips, strict=False):
                if row not in wanted:
                    continue
                line = chops[row]
                final_cuts = [cut for cut in cuts[row] if end >= cut >= x]
                for cut, piece in zip(final_cuts, strip.divide([cut - x for cut in final_cuts[1:]]), strict=False):
                    if line.get(cut) is None:
                        line[cut] = piece
    return ChopsUpdate(chops, spans, [cut_set[1:] for cut_set in cuts])


textual_render_partial_update = None  # Textual's own, once replaced (tests compare the two)


def install() -> bool:
    """Whether the cropping renderer is in use."""
    try:
        from textual._compositor import ChopsUpdate, Compositor
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
    if all(hasattr(Compositor, name) for name in ("render_partial_update", "_regions_to_spans", "cuts",
                                                  "visible_widgets")) and \
            {"_dirty_regions", "size"} <= set(Compositor.__init__.__code__.co_names):
        global textual_render_partial_update
        textual_render_partial_update = Compositor.render_partial_update
        Compositor.render_partial_update = _render_partial_update  # type: ignore[method-assign]
    return True
