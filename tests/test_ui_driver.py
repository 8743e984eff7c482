"""The driver that sends only the cells that changed (tuimon/ui/driver.py): a terminal that runs its
output shows, after every update, the same cells in the same styles as one that runs Textual's
own output, in fewer bytes; what it does not read passes unchanged and makes it start over."""

import random
import re

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from tuimon.ui.driver import Screen, after_reset, parse

WIDTH, HEIGHT = 60, 8
Cell = tuple[str, tuple]


class Terminal:
    """Each cell's character and the graphics state it was written in (foreground, background,
    attributes), from the placements, SGR sequences (0 resets; the rest add up), newlines and text
    these outputs hold."""

    def __init__(self) -> None:
        self.cells: list[list[Cell]] = [[(" ", ("39", "49", ()))] * WIDTH for _ in range(HEIGHT)]
        self.fg, self.bg, self.attrs = "39", "49", set()
        self.x = self.y = 0

    def play(self, output: str) -> None:
        for move, sgr, other, text in re.findall(r"\x1b\[(\d+;\d+)H|\x1b\[([0-9;]*)m|(\x1b\[\?\d+[hl]|\n)|([^\x1b\n]+)",
                                                 output):
            if move:
                row, col = move.split(";")
                self.y, self.x = int(row) - 1, int(col) - 1
            elif other == "\n":
                self.y += 1
            elif text:
                for ch in text:
                    self.cells[self.y][self.x] = (ch, (self.fg, self.bg, tuple(sorted(self.attrs))))
                    self.x += 1
            elif not other:
                self._sgr(sgr)

    def _sgr(self, sgr: str) -> None:
        codes = (sgr or "0").split(";")
        while codes:
            code = codes.pop(0)
            if code in ("38", "48"):  # 5;n or 2;r;g;b
                n = 2 if codes[0] == "5" else 4
                code += ";" + ";".join(codes[:n])
                del codes[:n]
            if code == "0":
                self.fg, self.bg, self.attrs = "39", "49", set()
            elif code.startswith("38") or code == "39" or 30 <= int(code.split(";")[0]) <= 37:
                self.fg = code
            elif code.startswith("48") or code == "49" or 40 <= int(code.split(";")[0]) <= 47:
                self.bg = code
            else:
                self.attrs.add(code)


STYLES = [None, Style(bold=True), Style(color="red"), Style(color="default", bgcolor="color(17)"),
          Style(bold=True, dim=True), Style(color="color(39)", bgcolor="color(49)"), Style(reverse=True, color="yellow")]


def random_line(rnd: random.Random) -> Strip:
    segs, n = [], 0
    while n < WIDTH:
        k = min(rnd.randint(1, 9), WIDTH - n)
        segs.append(Segment("".join(rnd.choice("ab 019.%▁▇…") for _ in range(k)), rnd.choice(STYLES)))
        n += k
    return Strip(segs, WIDTH)


def textual_update(lines: list[Strip], spans: list[tuple[int, int, int]], chop_starts: list[int],
                   console: Console) -> str:
    """An update in the shape of Textual's partial update: each dirty span of a line sent from the
    start of the chop it falls in to its end, each segment styled and reset; a newline between
    spans; the cursor placed last."""
    out = []
    for k, (y, x1, x2) in enumerate(spans):
        x = max(c for c in chop_starts if c <= x1)
        out.append(f"\x1b[{y + 1};{x + 1}H" + lines[y].crop(x, x2).render(console))
        if k < len(spans) - 1:
            out.append("\n")
    return "".join(out) + "\x1b[1;1H"


def test_the_terminal_ends_with_the_same_cells_in_fewer_bytes():
    console = Console(color_system="256", force_terminal=True, width=WIDTH)
    rnd = random.Random(42)
    for trial in range(30):
        screen, plain, diffed = Screen(), Terminal(), Terminal()
        lines = [random_line(rnd) for _ in range(HEIGHT)]
        chop_starts = [0, *sorted(rnd.sample(range(1, WIDTH), 3))]
        sent = raw = 0
        for step in range(40):
            spans = []
            for y in sorted(rnd.sample(range(HEIGHT), rnd.randint(1, HEIGHT))):
                if step and rnd.random() < 0.6:  # a few cells of the line change
                    cells = [(ch, st) for text, st, _ in lines[y] for ch in text]
                    for _ in range(rnd.randint(1, 3)):
                        i = rnd.randrange(WIDTH)
                        cells[i] = (rnd.choice("0123456789"), rnd.choice(STYLES))
                    lines[y] = Strip([Segment(ch, st) for ch, st in cells], WIDTH)
                x1 = rnd.randrange(WIDTH)
                spans.append((y, x1, rnd.randint(x1 + 1, WIDTH)))
                if rnd.random() < 0.3:
                    x1 = rnd.randrange(WIDTH)
                    spans.append((y, x1, rnd.randint(x1 + 1, WIDTH)))
            update = textual_update(lines, spans, chop_starts, console)
            parsed = parse(update)
            assert parsed is not None, update
            out = screen.update(*parsed)
            plain.play(update)
            diffed.play(out)
            assert diffed.cells == plain.cells, (trial, step)
            raw, sent = raw + len(update.encode()), sent + len(out.encode())
        assert sent < raw / 2, (sent, raw)


def test_an_unchanged_update_sends_nothing_and_a_changed_cell_itself():
    console = Console(color_system="256", force_terminal=True, width=WIDTH)
    line = Strip([Segment("GPU 0 ", Style(bold=True)), Segment("SM active 34%", None), Segment(" " * 41, None)], WIDTH)
    screen = Screen()
    update = f"\x1b[3;1H{line.render(console)}\x1b[1;1H"
    first = screen.update(*parse(update))  # type: ignore[misc]
    assert "SM active 34%" in first
    assert screen.update(*parse(update)) == ""  # type: ignore[misc]
    changed = Strip([Segment("GPU 0 ", Style(bold=True)), Segment("SM active 35%", None), Segment(" " * 41, None)],
                    WIDTH)
    assert screen.update(*parse(f"\x1b[3;1H{changed.render(console)}\x1b[1;1H")) == "\x1b[3;18H\x1b[0m5\x1b[1;1H"  # type: ignore[misc]


def test_what_it_does_not_read_is_not_an_update():
    assert parse("\x1b[?1049h\x1b[1;1Hx") is None  # (the alternate screen: any other sequence)
    assert parse("\x1b[1;1Hab\ncd") is None  # (a newline with no placement after it)
    assert parse("\x1b[1;1H漢") is None  # (a wide character)
    assert parse("\x1b[1;1He\u0301") is None  # (a combining one)
    assert parse("x") is None  # (text before any placement)
    assert parse("\x1b[1;1H\x1b]8;;http://x\x1b\\x") is None  # (a hyperlink)
    assert parse("\x1b[2;3Hab\x1b[1mc\x1b[0m\n\x1b[3;1Hd\x1b[5;6H") == (
        [(1, 2, "ab", ""), (1, 4, "c", "1"), (2, 0, "d", "")], (4, 5))
    assert after_reset("39;49") == "" and after_reset("2;39;100") == "2;100"
    assert after_reset("38;5;39;48;5;49") == "38;5;39;48;5;49"


def test_forgotten_cells_are_sent_again():
    screen = Screen()
    update = "\x1b[1;1Habc\x1b[1;1H"
    assert screen.update(*parse(update))  # type: ignore[misc]
    assert screen.update(*parse(update)) == ""  # type: ignore[misc]
    screen.forget()
    assert "abc" in screen.update(*parse(update))  # type: ignore[misc]


def test_a_first_update_learned_as_it_came_leaves_the_model_update_would():
    """Where the model knows nothing (the first paint, a forget), the driver sends Textual's update as
    it came and learn()s it: the model, and every later update's output, as update() would have them."""
    console = Console(color_system="256", force_terminal=True, width=WIDTH)
    rnd = random.Random(7)
    for trial in range(10):
        learned, updated, plain, diffed = Screen(), Screen(), Terminal(), Terminal()
        lines = [random_line(rnd) for _ in range(HEIGHT)]
        for step in range(10):
            spans = [(y, 0, WIDTH) for y in range(HEIGHT)] if step == 0 else \
                [(y, x, WIDTH) for y in sorted(rnd.sample(range(HEIGHT), 3)) for x in [rnd.randrange(WIDTH)]]
            if step:
                y = rnd.randrange(HEIGHT)
                lines[y] = random_line(rnd)
            update = textual_update(lines, spans, [0], console)
            parsed = parse(update)
            assert parsed is not None
            want = updated.update(*parsed)
            if step == 0:
                learned.learn(*parsed)
                out = update
            else:
                out = learned.update(*parsed)
                assert out == want, (trial, step)
            assert learned.rows == updated.rows and learned.cursor == updated.cursor, (trial, step)
            plain.play(update)
            diffed.play(out)
            assert diffed.cells == plain.cells, (trial, step)
