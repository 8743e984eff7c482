"""Panels (tuimon/ui/widgets.py) mark dirty only the cells that changed, and lay lines out through
Rich: the runs they find are those of a cell-by-cell comparison; their segments are Rich's own."""

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

HEADER = Style(color="default", bgcolor="color(17)")


def _changed_spans_cell_by_cell(old: Strip, new: Strip) -> list[tuple[int, int]]:
    """widgets.changed_spans as it was: every cell of the two lines compared (the reference)."""
    from tuimon.ui.widgets import GAP

    if old == new:
        return []
    a = [(ch, style) for text, style, _ in old for ch in text]
    b = [(ch, style) for text, style, _ in new for ch in text]
    n = max(len(a), len(b))
    a += [None] * (n - len(a))
    b += [None] * (n - len(b))
    spans: list[list[int]] = []
    for i in range(n):
        if a[i] != b[i]:
            if spans and i - spans[-1][1] < GAP:
                spans[-1][1] = i + 1
            else:
                spans.append([i, i + 1])
    return [(x, y) for x, y in spans]


def test_changed_spans_finds_the_cells_that_differ_as_a_cell_by_cell_comparison_does():
    import random

    from tuimon.ui.widgets import changed_spans

    rnd = random.Random(27)
    styles = [None, Style(bold=True), Style(bold=True), Style(color="red"), HEADER, Style(color="red", dim=True)]

    def line(base=None):
        if base is not None and rnd.random() < 0.7:  # a few changes to a line
            cells = [(ch, st) for text, st, _ in base for ch in text]
            for _ in range(rnd.randint(0, 4)):
                k = rnd.randrange(len(cells) + 1)
                what = rnd.random()
                if what < 0.4 and k < len(cells):
                    cells[k] = (rnd.choice("0123456789 "), cells[k][1])
                elif what < 0.6 and k < len(cells):
                    cells[k] = (cells[k][0], rnd.choice(styles))
                elif what < 0.8:
                    cells.insert(k, (rnd.choice("ab "), rnd.choice(styles)))
                elif cells:
                    del cells[min(k, len(cells) - 1)]
            segs, k = [], 0
            while k < len(cells):  # cut into segments anywhere (the same style may span two)
                n = rnd.randint(1, 6)
                part = cells[k:k + n]
                for ch, st in part:
                    if segs and segs[-1][1] is st and rnd.random() < 0.5:
                        segs[-1] = (segs[-1][0] + ch, st)
                    else:
                        segs.append((ch, st))
                k += n
            return Strip([Segment(t, s) for t, s in segs])
        return Strip([Segment("".join(rnd.choice("xy01 ") for _ in range(rnd.randint(0, 9))), rnd.choice(styles))
                      for _ in range(rnd.randint(0, 8))])

    for _ in range(3000):
        old = line()
        new = line(old)
        assert changed_spans(old, new) == _changed_spans_cell_by_cell(old, new), (list(old), list(new))


def test_a_panels_segments_are_rich_own_whatever_the_spans():
    """widgets.segments (styles combined once per console) gives what Text.render gives: random
    texts with a style of their own or not, nested, overlapping, empty and touching spans, names,
    Style objects, unknown names; twice, so the second time comes from the cache."""
    import random

    from rich.text import Text

    from tuimon.ui.widgets import segments

    console = Console(force_terminal=True, markup=False, highlight=False)
    styles = ["bold", "dim", "green", "on #203040", "bold red on white", "no-such-style", "italic underline",
              Style(color="cyan"), Style(bgcolor="blue", bold=True), "", "reverse"]
    rnd = random.Random(7)
    for _ in range(2):
        for _ in range(400):
            plain = "".join(rnd.choice("ab ▁▇é.%0") for _ in range(rnd.randrange(0, 30)))
            text = Text(plain, style=rnd.choice(["", "dim", Style(italic=True)]))
            for _ in range(rnd.randrange(0, 6)):
                start = rnd.randrange(0, len(plain) + 1)
                text.stylize(rnd.choice(styles), start, rnd.randrange(start, len(plain) + 1))
            assert segments(console, text) == list(text.render(console)), text
