"""The verdict, its numbers and the next step, fitted to the panel's lines."""

from __future__ import annotations

import io
import re
from collections.abc import Callable

from rich.cells import cell_len, chop_cells
from rich.console import Console
from rich.text import Text

from ...analysis.verdicts import Verdict
from ...channel.text import safe_text
from ..style import VERDICT_STYLE

VERDICT_LINES = 4  # the verdict panel's height (tuimon.tcss): the numbers take at most 2 of them


def verdict_line(v: Verdict, width: int = 0) -> Text:
    """The verdict, its numbers, and on the next line the next step (e: every rule, explained).
    width: fit the panel's VERDICT_LINES there (0: no limit): the numbers and the next step are
    each cut short with "…" rather than mid-sentence by the panel's edge."""
    numbers = Text()
    numbers.append(f" {v.headline.upper()} ", VERDICT_STYLE.get(v.code, "bold") + " reverse")
    numbers.append("  ")
    numbers.append(safe_text(v.evidence, 300))
    numbers = clamp(numbers, Text(), width, 2)
    step = Text()
    step.append("→ ", "bold")
    step.append(safe_text(v.next_step, 400))
    tail = Text(f"  ({v.confidence} confidence; e: why)", "dim") if v.code != "waiting" else Text()
    step = clamp(step, tail, width, VERDICT_LINES - wrapped_lines(numbers, width))
    return Text("\n").join([numbers, step])


_CONSOLE = Console(file=io.StringIO(), width=1000, color_system=None)  # wraps text as the panels do; draws nothing
_WORD = re.compile(r"\s*\S+\s*")  # a word and the spaces after it (before it, at a line's start)


def line_count(line: str, width: int) -> int:
    """How many lines one line of plain text takes width cells wide, broken as Rich's Text.wrap
    breaks it with overflow "fold" (words whole where they fit, a longer word folded by cells):
    its count without building the lines. Rich's own line breaker is private, so this is
    the same walk over public rich.cells; tests/test_ui_verdict.py checks it against Text.wrap."""
    lines, offset = 1, 0
    for match in _WORD.finditer(line):
        word = match.group(0)
        length = cell_len(word.rstrip())
        if width - offset >= length:
            offset += cell_len(word)
        elif length > width:  # folded across lines: a break before it (unless at the text's start), then each piece
            pieces = chop_cells(word, width)
            lines += len(pieces) - (0 if match.start() else 1)
            offset = cell_len(pieces[-1])
        elif offset and match.start():
            lines += 1
            offset = cell_len(word)
    return lines


def wrapped_lines(text: Text, width: int) -> int:
    """How many lines text takes in a panel width cells wide (0: one per line of it). Rich's line
    breaking on the plain text: the count of Text.wrap without building the lines (clamp asks ~10
    times a verdict, 3 ms a verdict that way); Text.wrap itself where tabs or another overflow
    would change the count."""
    plain = text.plain
    if not width:
        return len(plain.split("\n"))
    if "\t" in plain or text.no_wrap or (text.overflow or "fold") != "fold":
        return len(text.wrap(_CONSOLE, width))
    return sum(line_count(line, width) for line in plain.split("\n"))


def clamp(head: Text, tail: Text, width: int, lines: int) -> Text:
    """head then tail in at most `lines` lines of width (0: no limit): where they take more, head
    is cut short at a word, with "…"; tail stays whole."""
    if not width or wrapped_lines(head + tail, width) <= lines:
        return head + tail

    def cut(n: int) -> Text:
        short = head[:n]
        short.rstrip()
        return short + Text("…") + tail

    # The search counts lines on the plain text alone where that is what wrapped_lines counts
    # (building a Text a try was most of a verdict's 1.6 ms, ~1 a window)
    plain, end = head.plain, "…" + tail.plain
    fits: Callable[[int], bool] = lambda n: wrapped_lines(cut(n), width) <= lines  # noqa: E731
    if "\t" not in plain + end and not head.no_wrap and (head.overflow or "fold") == "fold":
        fits = lambda n: sum(line_count(line, width)  # noqa: E731
                             for line in (plain[:n].rstrip() + end).split("\n")) <= lines
    lo, hi = 0, len(plain)  # the longest head[:n] that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    space = plain.rfind(" ", 0, lo + 1)
    return cut(space if space > lo - 20 and space > 0 else lo)
