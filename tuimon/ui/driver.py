"""Textual's Linux driver, sending the terminal only the cells that differ from what it shows.

Textual's partial update sends each dirty line from the left edge of the widget's piece of it
("chop") to the change's end, a span at a time (a line with three changed numbers goes three
times), each segment's style set and reset around it: on the demo's replay at 120x40 that was
~1.4 KB/s where the cells that changed are ~0.15 KB/s. Through public API only (a driver's `write`,
which every byte Textual sends goes through), this driver keeps a model of the screen: the
character and the graphics state (SGR) of every cell an update of Textual's wrote, and passes on
only the cells that differ, a run at a time, each style set where it changes (without the default
colours a reset sets already).

An update it reads is what Textual's compositor writes (`ChopsUpdate`, `LayoutUpdate`): cursor
placements (ESC[row;colH), SGR sequences, printable text of one cell a character, and newlines
followed by a placement. Anything else (alternate screen, modes, a wide or combining character, a
hyperlink) is passed on as it came and the model is forgotten, so the next updates are sent whole
and teach it again; so is a change of the terminal's size (Textual then repaints everything).
The upstream change that would make this unnecessary (a note for Textual): ChopsUpdate cropping
its chops on the left too (its own "TODO: crop to x extents"), merging spans of one line, and
writing a style only where it changes.
"""

from __future__ import annotations

import os
import re

from rich.cells import cell_len
from textual.drivers.linux_driver import LinuxDriver

_PLACE = re.compile(r"\x1b\[(\d+);(\d+)H")  # a cursor placement (1-based row; column)
_SGR = re.compile(r"\x1b\[([0-9;]*)m")
# Sequences that change no cell and no graphics state: passed on, the model kept.
HARMLESS = frozenset({"\x1b[?2026h", "\x1b[?2026l", "\x1b[?25l", "\x1b[?25h"})
UNKNOWN = "\0"  # a cell whose content the model does not know (never equal to a printable character)
GAP = 4  # known, unchanged cells between two changed runs sent again rather than a placement (~7 bytes)

Piece = tuple[int, int, str, str]  # row, column (0-based), text, its graphics state (SGR parameters; "" reset)


def parse(data: str) -> tuple[list[Piece], tuple[int, int] | None] | None:
    """The pieces of text an update writes and where it leaves the cursor (its last placement with
    no text after it), or None where data is not an update of the kind above. (Split by
    placements, then by SGR sequences: the cost of a second's update is mostly here.)"""
    parts = _PLACE.split(data)  # ["", row, col, what follows, row, col, ...]
    if parts[0] or len(parts) < 4:
        return None
    pieces: list[Piece] = []
    sgr = ""
    last = len(parts) - 3
    for k in range(1, len(parts), 3):
        row, col, body = int(parts[k]) - 1, int(parts[k + 1]) - 1, parts[k + 2]
        if body.endswith("\n") and k != last:  # (a newline moves the cursor as the terminal's settings
            body = body[:-1]  # say: only one that a placement follows)
        bits = _SGR.split(body)  # [text, params, text, ...]
        for j, text in enumerate(bits):
            if j % 2:
                params = text
                if params in ("", "0"):
                    sgr = ""
                elif params.startswith("0;"):
                    sgr = params[2:]
                else:
                    sgr = f"{sgr};{params}" if sgr else params
            elif text:
                if not one_cell_each(text):
                    return None
                pieces.append((row, col, text, sgr))
                col += len(text)
    body = parts[-1]
    cursor = (int(parts[-3]) - 1, int(parts[-2]) - 1) if not body else None
    return pieces, cursor


_ONE_CELL: dict[str, bool] = {}


def one_cell_each(text: str) -> bool:
    """Whether every character of text is printable and takes one cell (no escape, newline, wide
    or combining character): where the model knows where the cursor goes. (Remembered per text:
    the same labels and sparkline pieces come back every second.)"""
    if text.isascii():
        return text.isprintable()
    got = _ONE_CELL.get(text)
    if got is None:
        if len(_ONE_CELL) > 4096:
            _ONE_CELL.clear()
        got = _ONE_CELL[text] = all(ch.isprintable() and cell_len(ch) == 1 for ch in text)
    return got


_AFTER_RESET: dict[str, str] = {}


def after_reset(sgr: str) -> str:
    """SGR parameters as written right after a reset (0): without the default colours (39, 49),
    which the reset sets already (a colour's own parameters, 38;5;39 say, kept whole)."""
    got = _AFTER_RESET.get(sgr)
    if got is None:
        codes, keep, k = sgr.split(";") if sgr else [], [], 0
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
        got = _AFTER_RESET[sgr] = ";".join(keep)
    return got


class Screen:
    """What the terminal shows, as far as the updates passed on say: per row, each cell's character
    and graphics state (UNKNOWN where not known)."""

    def __init__(self) -> None:
        self.rows: dict[int, tuple[list[str], list[str]]] = {}
        self.cursor: tuple[int, int] | None = None

    def forget(self) -> None:
        self.rows.clear()
        self.cursor = None

    def _row(self, row: int, end: int) -> tuple[list[str], list[str]]:
        """A row's cells and their styles, at least `end` long (unknown cells where nothing was written)."""
        chars, sgrs = self.rows.get(row) or self.rows.setdefault(row, ([], []))
        if len(chars) < end:
            chars.extend(UNKNOWN * (end - len(chars)))
            sgrs.extend([""] * (end - len(sgrs)))
        return chars, sgrs

    def learn(self, pieces: list[Piece], cursor: tuple[int, int] | None) -> None:
        """The model holds what the pieces write, the update having gone to the terminal as it came
        (where nothing is known, every cell differs: the first paint, or after a forget). Slices,
        not a cell at a time: the first frame waits for this."""
        for row, col, text, sgr in pieces:
            end = col + len(text)
            chars, sgrs = self._row(row, end)
            chars[col:end] = text
            sgrs[col:end] = [sgr] * len(text)
        self.cursor = cursor

    def update(self, pieces: list[Piece], cursor: tuple[int, int] | None) -> str:
        """The bytes that bring the terminal from what it shows to what the pieces write; the model
        then holds the result."""
        changed: dict[int, dict[int, tuple[str, str]]] = {}
        for row, col, text, sgr in pieces:
            end = col + len(text)
            chars, sgrs = self._row(row, end)
            if "".join(chars[col:end]) == text and sgrs[col:end] == [sgr] * len(text):
                continue  # (the common case: the piece is on screen already)
            line = changed.setdefault(row, {})
            for k, ch in enumerate(text, col):
                if chars[k] != ch or sgrs[k] != sgr:
                    chars[k], sgrs[k] = ch, sgr
                    line[k] = (ch, sgr)
        out: list[str] = []
        state: str | None = None  # the terminal's graphics state as this update leaves it (None: not known)
        for row in sorted(changed):
            cells = changed[row]
            chars, sgrs = self.rows[row]
            cols = sorted(cells)
            run_start = prev = cols[0]
            runs = []
            for c in cols[1:]:
                if c - prev - 1 > GAP or UNKNOWN in chars[prev + 1:c]:
                    runs.append((run_start, prev + 1))
                    run_start = c
                prev = c
            runs.append((run_start, prev + 1))
            for start, end in runs:
                out.append(f"\x1b[{row + 1};{start + 1}H")
                for k in range(start, end):
                    sgr = sgrs[k]
                    if sgr != state:
                        ansi = after_reset(sgr)
                        out.append(f"\x1b[{ansi}m" if state == "" else f"\x1b[0;{ansi}m" if ansi else "\x1b[0m")
                        state = sgr
                    out.append(chars[k])
        if state:
            out.append("\x1b[0m")
        if cursor is not None and (out or cursor != self.cursor):
            out.append(f"\x1b[{cursor[0] + 1};{cursor[1] + 1}H")
            self.cursor = cursor
        elif out:
            self.cursor = None  # (left after the last cell sent)
        return "".join(out)


class DiffingLinuxDriver(LinuxDriver):
    """LinuxDriver whose writes of Textual's updates send only the cells that changed."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.screen_model = Screen()
        self._size: tuple[int, int] | None = None

    def write(self, data: str) -> None:
        if data in HARMLESS:
            return super().write(data)
        parsed = parse(data) if data else None
        size = self._terminal_size()
        if size != self._size:  # (resized: the terminal may have moved or dropped any cell)
            self.screen_model.forget()
            self._size = size
        if parsed is None or (size is not None and any(
                row >= size[1] or col + len(text) > size[0] for row, col, text, _ in parsed[0])):
            self.screen_model.forget()  # (also an update for a larger screen, written before Textual saw a resize)
            return super().write(data)
        if not self.screen_model.rows:  # (nothing known: all of it differs; sent whole, as Textual wrote it)
            self.screen_model.learn(*parsed)
            return super().write(data)
        out = self.screen_model.update(*parsed)
        if out:
            super().write(out)

    def _terminal_size(self) -> tuple[int, int] | None:
        try:
            size = os.get_terminal_size(self.fileno)
        except (OSError, ValueError):
            return None
        return size.columns, size.lines
