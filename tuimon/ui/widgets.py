"""Panels: text widgets that send the terminal only the cells that changed.

A Static repaints (and re-lays-out the screen) on every update, so a panel whose one number
changed was re-sent whole every second. A Panel renders its Text to strips itself, compares them
with what is on screen, and marks dirty only the runs of cells that differ on each changed line;
Textual's compositor then sends each dirty line from the left edge of the widget's piece of it
("chop") to the changed run's end (it crops chops on the right only). A layout is asked for only
when the number of lines changes."""

from __future__ import annotations

from itertools import pairwise
from operator import itemgetter
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

if TYPE_CHECKING:
    from textual.screen import Screen

GAP = 6  # unchanged cells between two changed runs worth a cursor move (~8 bytes) rather than resending
STYLES_KEPT = 4096  # combined styles kept per console (a screen uses a few dozen; past this the cache starts over)
_combined: WeakKeyDictionary[Console, dict[tuple, Style]] = WeakKeyDictionary()


def segments(console: Console, text: Text) -> list[Segment]:
    """Text.render's segments (Rich's walk over the spans' bounds, the same output), with each run's
    style combined once per console, not once per line: a style is a name or a Style, resolved by
    the console's theme, so the same styles give the same combination every time (a changed line
    laid out in ~12 us rather than ~23; laying lines out was a third of a cycle's handling)."""
    plain, spans = text.plain, text.spans
    if not spans:
        return [Segment(plain)]
    cache = _combined.get(console)
    if cache is None or len(cache) > STYLES_KEPT:
        cache = _combined[console] = {}
    raw = (text.style, *(span.style for span in spans))  # (0: the text's own style, under its spans')
    bounds = [(0, False, 0), *((span.start, False, i) for i, span in enumerate(spans, 1)),
              *((span.end, True, i) for i, span in enumerate(spans, 1)), (len(plain), True, 0)]
    bounds.sort(key=itemgetter(0, 1))
    stack: list[int] = []
    out = []
    for (offset, leaving, i), (next_offset, _, _) in pairwise(bounds):
        if leaving:
            stack.remove(i)
        else:
            stack.append(i)
        if next_offset > offset:
            key = tuple([raw[k] for k in sorted(stack)])
            style = cache.get(key)
            if style is None:
                null = Style.null()
                style = cache[key] = Style.combine([console.get_style(r, default=null) for r in key])
            out.append(Segment(plain[offset:next_offset], style))
    return out


def changed_spans(old: Strip, new: Strip) -> list[tuple[int, int]]:
    """[(first, end), ...] runs of cells where two lines differ, in text or style; runs closer
    than GAP cells are merged. (Cells are counted as characters.) The two lines are walked a run
    of one segment of each at a time, not a cell at a time (half the time on the demo's lines)."""
    if old == new:
        return []
    spans: list[list[int]] = []

    def differ(first: int, end: int) -> None:
        if spans and first - spans[-1][1] < GAP:
            spans[-1][1] = end
        else:
            spans.append([first, end])

    a = [(text, style) for text, style, _ in old if text]
    b = [(text, style) for text, style, _ in new if text]
    i = j = oa = ob = pos = 0
    while i < len(a) and j < len(b):
        ta, sa = a[i]
        tb, sb = b[j]
        n = min(len(ta) - oa, len(tb) - ob)
        if sa != sb:
            differ(pos, pos + n)
        else:
            pa, pb = ta[oa:oa + n], tb[ob:ob + n]
            if pa != pb:
                for k in range(n):
                    if pa[k] != pb[k]:
                        differ(pos + k, pos + k + 1)
        pos += n
        oa += n
        ob += n
        if oa == len(ta):
            i, oa = i + 1, 0
        if ob == len(tb):
            j, ob = j + 1, 0
    rest = sum(len(t) for t, _ in a[i:]) - oa + sum(len(t) for t, _ in b[j:]) - ob  # (one of the two is 0)
    if rest:
        differ(pos, pos + rest)
    return [(x, y) for x, y in spans]


class Panel(Widget):
    DEFAULT_CSS = "Panel { height: auto; }"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._last: Text | None = None
        self._lines: list[tuple[Text, list[Strip]]] = []  # each line of the text and its strips
        self._strips: list[Strip] = []
        self._width = 0  # the width the strips were laid out for

    @property
    def text_width(self) -> int:
        w = self.content_size.width
        return w if w > 0 else max(20, self.app.size.width - 4)

    def show(self, text: Text) -> None:
        """Show text, sending only what changed."""
        width = self.content_size.width
        if text == self._last and width == self._width:
            return  # unchanged: no repaint, no bytes to the terminal
        self._last = text
        if width <= 0:  # not laid out yet (or hidden): drawn once the width is known
            self._width = 0  # (so the next layout lays this text out, even at the width it had before)
            if self.display:
                self.refresh(layout=True)
            return
        old = self._strips
        new = self._lay_out(text, width)
        if len(old) != len(new) or width != self._width or not old:
            self._strips, self._width = new, width
            self.refresh(layout=len(old) != len(new))
            return
        self._strips = new
        # One region a changed line, its first changed cell to its last: Textual sends a line's
        # span from the panel's left edge anyway, once a span (the driver passes on only the
        # cells that differ), so two regions on one line would make it render and send it twice.
        regions = [Region(runs[0][0], y, runs[-1][1] - runs[0][0], 1)
                   for y, (a, b) in enumerate(zip(old, new, strict=True)) if (runs := changed_spans(a, b))]
        if regions:  # (one refresh: each call clears the widget's caches and checks for idle again)
            self.refresh(*regions)

    def _lay_out(self, text: Text, width: int) -> list[Strip]:
        """Strips for text at width; lines whose text did not change keep the strips they had
        (laying text out is most of a panel's cost)."""
        known = self._lines if width == self._width else []
        lines = []
        strips: list[Strip] = []
        for k, line in enumerate(text.split("\n", allow_blank=True)):
            if k < len(known) and known[k][0] == line:
                done = known[k][1]
            else:
                done = self._lay_out_line(line, width)
            lines.append((line, done))
            strips += done
        self._lines = lines
        return strips

    def _lay_out_line(self, line: Text, width: int) -> list[Strip]:
        """One line of text as strips, wrapped at width, in the widget's own style: through Rich,
        which lays a line out about 10x faster than Textual's Content path (a panel lays out ~10
        changed lines a second)."""
        console, base = self.app.console, self.visual_style.rich_style
        parts = [line] if line.cell_len <= width else line.wrap(console, width)
        return [Strip(segments(console, part), part.cell_len).apply_style(base) for part in parts]

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self._last is None:
            return 0
        if width != self._width:
            self._strips = self._lay_out(self._last, width)
            self._width = width
        return len(self._strips)

    def on_resize(self, event: events.Resize) -> None:
        # Laid out for another width (e.g. before the body's scrollbar appeared): the panel's
        # text is built for its width by the caller, so ask the app to build it again now
        # rather than at the next sample, which a paused or finished view never gets.
        if self._last is not None and self.content_size.width != self._width:
            redraw = getattr(self.app, "redraw", None)
            if redraw is not None:
                self.call_after_refresh(redraw)

    def render_line(self, y: int) -> Strip:
        if 0 <= y < len(self._strips):
            return self._strips[y]
        return Strip.blank(self.size.width, self.visual_style.rich_style)


class Keys(Panel):
    """The screen's keys on one line, the ones Textual's Footer would list (its active bindings
    that show, one per action, in order; disabled ones dim), drawn as one panel: the Footer makes
    a widget per key and composes them again whenever the bindings change, which was half the
    app's first compose."""

    DEFAULT_CSS = "Keys { dock: bottom; height: 1; background: $footer-background; }"

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._list)
        self._list(self.screen)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _list(self, screen: Screen[Any]) -> None:
        if screen is not self.screen:
            return
        colors = self.app.theme_variables
        key = f"bold {colors.get('footer-key-foreground', '')}".strip()
        words = colors.get("footer-description-foreground", "")
        text, actions = Text(" "), set()
        for _, binding, enabled, _ in screen.active_bindings.values():
            if not binding.show or binding.action in actions:
                continue
            actions.add(binding.action)
            dim = "" if enabled else " dim"
            text.append(self.app.get_key_display(binding), key + dim)
            text.append(f" {binding.description}  ", (words + dim).strip())
        self.show(text)
