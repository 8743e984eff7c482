"""The cropping renderer of partial updates (tuimon/ui/partial_updates.py): a terminal that runs
its output ends with the same cells, in the same styles, as one that runs Textual's per-segment
rendering, in fewer bytes."""

import re

import pytest
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from textual._compositor import ChopsUpdate
from textual.strip import Strip

from tuimon.ui import partial_updates

HEADER = Style(color="default", bgcolor="color(17)")
BOLD_DIM = Style(bold=True, dim=True)


def play(output: str, width: int = 40, height: int = 3) -> list[list[tuple[str, tuple]]]:
    """Each cell's character and the graphics state it was written in (foreground, background,
    attributes), from the cursor moves, SGR sequences (0 resets; the rest add up) and text that
    these renderers write."""
    cells: list[list[tuple[str, tuple]]] = [[(" ", ("39", "49", ()))] * width for _ in range(height)]
    fg, bg, attrs = "39", "49", set()
    x = y = 0
    for move, right, sgr, text in re.findall(r"\x1b\[(\d+;\d+)H|\x1b\[(\d+)C|\x1b\[([0-9;]*)m|([^\x1b]+)", output):
        if move:
            row, col = move.split(";")
            y, x = int(row) - 1, int(col) - 1
        elif right:
            x = min(x + int(right), width - 1)
        elif text:
            for ch in text:
                cells[y][x] = (ch, (fg, bg, tuple(sorted(attrs))))
                x += 1
        else:
            codes = (sgr or "0").split(";")
            while codes:
                code = codes.pop(0)
                if code in ("38", "48"):  # 5;n or 2;r;g;b
                    code += ";" + ";".join(codes[:2] if codes[0] == "5" else codes[:4])
                    del codes[:2 if code.split(";")[1] == "5" else 4]
                if code == "0":
                    fg, bg, attrs = "39", "49", set()
                elif code.startswith("38") or code == "39" or 30 <= int(code.split(";")[0]) <= 37:
                    fg = code
                elif code.startswith("48") or code == "49" or 40 <= int(code.split(";")[0]) <= 47:
                    bg = code
                else:
                    attrs.add(code)
    return cells


def per_segment(update: ChopsUpdate, console: Console) -> str:
    """What the renderer sent before: each piece as Strip.render makes it (every segment's style
    set, then reset)."""
    out = []
    for y, x1, x2 in update.spans:
        for end, (x, strip) in zip(update.chop_ends[y], update.chops[y].items(), strict=False):
            if strip is None or x >= x2 or end <= x1:
                continue
            left, right = max(x, x1), min(end, x2)
            piece = strip if (left, right) == (x, end) else strip.crop(left - x, right - x)
            out.append(f"\x1b[{y + 1};{left + 1}H" + piece.render(console))
    return "".join(out)


def test_changed_cells_land_in_the_same_styles_in_fewer_bytes():
    assert partial_updates.install()
    console = Console(color_system="256", force_terminal=True, width=40)
    header = Strip([Segment(t, HEADER) for t in ("tuimon · up 0:00:", "18", " · step ", "388")])
    body = Strip([Segment(t, s) for t, s in (("now step ", None), ("422", BOLD_DIM), (" · every ", None),
                                             ("30.2", BOLD_DIM), (" ms", None))])
    update = ChopsUpdate(chops=[{0: header}, {0: body}, {0: None}], spans=[(0, 17, 19), (0, 26, 29), (1, 0, 34)],
                         chop_ends=[[header.cell_length], [body.cell_length], [40]])
    new, old = update.render_segments(console), per_segment(update, console)
    assert play(new) == play(old)
    assert play(new)[0][17] == ("1", ("39", "48;5;17", ()))
    assert play(new)[1][9][1] != play(new)[1][8][1]  # (the bold number, the plain text before it)
    assert re.findall(r"\x1b\[([0-9;]*)m", new)[-1] == "0"  # (the graphics state left reset)
    assert len(new) < 0.8 * len(old), (len(new), len(old))


@pytest.mark.asyncio
@pytest.mark.parametrize("fixture,size", [("h100_demo_v2.jsonl", (120, 40)), ("h200_demo.jsonl", (120, 40)),
                                          ("h100_demo_v2.jsonl", (80, 24)), ("h200x2_ddp_straggler.jsonl", (120, 40))])
async def test_a_partial_update_renders_the_same_cells_as_textuals(fixture, size):
    """The compositor's partial update that renders only the rows it sends (and of those only where
    no widget in front covers them) sends what Textual's, which renders every widget in the box
    around the dirty regions, sends; and what it sends (relative moves, fewer resets) leaves the
    cells as Textual's per-segment rendering does: a recording played cycle by cycle, every update
    checked."""
    from textual._compositor import Compositor

    from tests.conftest import ROOT
    from tuimon.monitor.state import MonitorState
    from tuimon.sources.recording import Recording
    from tuimon.ui.app import make_app

    app = make_app(None, "replay", MonitorState())
    assert partial_updates.textual_render_partial_update is not None
    ours, checked = Compositor.render_partial_update, []

    def both(self):
        dirty = self._dirty_regions.copy()
        got = ours(self)
        self._dirty_regions.update(dirty)
        want = partial_updates.textual_render_partial_update(self)
        assert (got is None) == (want is None)
        if got is not None:
            assert got.spans == want.spans
            sent = got.render_segments(app.console)
            assert sent == want.render_segments(app.console)
            # (a terminal that runs it ends as one that runs Textual's rendering of Textual's update)
            assert play(sent, *size) == play(per_segment(want, app.console), *size)
            checked.append(len(got.spans))
        return got

    Compositor.render_partial_update = both
    try:
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            for cycle in Recording(str(ROOT / "tests" / "fixtures" / fixture)).cycles():
                app.apply_cycle(cycle)
                await pilot.pause()
    finally:
        Compositor.render_partial_update = ours
    assert len(checked) > 5 and sum(checked) > 20, checked


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


def test_moves_right_only_after_plain_ascii_and_default_colours_are_left_to_the_reset():
    """A relative move (CSI n C) only where the cursor is certain: after printable ASCII (a
    character such as … is one cell or two depending on the terminal); 39 and 49 are what a reset
    (0) sets, so they are not sent after one, but a 256-colour parameter of the same number is kept."""
    assert partial_updates._after_reset("39;49") == ""
    assert partial_updates._after_reset("2;39;100") == "2;100"
    assert partial_updates._after_reset("38;5;39;48;5;49") == "38;5;39;48;5;49"
    assert partial_updates._after_reset("1;38;2;39;49;39;49") == "1;38;2;39;49;39"
    console = Console(color_system="256", force_terminal=True, width=40)
    line = Strip([Segment("ab…cd", None), Segment(" xyz 12345 ", Style(dim=True)), Segment("end" + " " * 21, None)])
    update = ChopsUpdate(chops=[{0: line}], spans=[(0, 0, 1), (0, 2, 3), (0, 4, 5), (0, 9, 10), (0, 39, 40)],
                         chop_ends=[[40]])
    out = update.render_segments(console)
    assert out.startswith("\x1b[1;1H") and "a\x1b[1C…" in out  # (after "a": 1 cell on)
    assert "…\x1b[1;5Hd" in out  # (after "…": placed, not moved)
    assert "\x1b[4C" in out and "\x1b[29C" in out  # (after "d" at 4: on to 9; then to 39)
    assert play(out) == play(per_segment(update, console))


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
