"""Textual's Linux driver with an input thread that sleeps until there is input.

Textual's input thread wakes ten times a second to time out a lone escape key, input or not: on the
dev machine its thread used 1.0-1.3 ms of CPU a second beside a ~14 ms monitor (`tuimon attach` on
the demo job, per-thread CPU from /proc). This one waits with that timeout only while the parser
holds part of a sequence, else until input comes or the driver stops input (a byte on a pipe of its
own wakes it). Where Textual's internals are not as this expects, Textual's own thread runs.
"""

from __future__ import annotations

import os
import selectors
from codecs import getincrementaldecoder
from typing import Any

from textual.drivers.linux_driver import LinuxDriver

try:
    from textual._loop import loop_last
    from textual._xterm_parser import XTermParser
except ImportError:  # (another Textual: its own input thread serves)
    XTermParser = None  # type: ignore[assignment,misc]

PENDING_TICK_S = 0.1  # Textual's tick, while a sequence is partly read (a lone ESC is a key after it)


class QuietLinuxDriver(LinuxDriver):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wake = os.pipe()  # a byte on it wakes the input thread to stop
        for fd in self._wake:
            os.set_blocking(fd, False)
        self._stopping = False  # (set by disable_input until its thread has ended)

    def run_input_thread(self) -> None:
        parser = XTermParser(self._debug) if XTermParser is not None else None
        if parser is None or not hasattr(parser, "_timeout_time"):
            return super().run_input_thread()
        fileno, read, decode = self.fileno, os.read, getincrementaldecoder("utf-8")().decode
        selector = selectors.SelectSelector()
        selector.register(fileno, selectors.EVENT_READ)
        selector.register(self._wake[0], selectors.EVENT_READ)

        def process(events: list[tuple[selectors.SelectorKey, int]], final: bool = False) -> None:  # (Textual's, the wake pipe left out)
            events = [e for e in events if e[0].fd == fileno]
            for last, (_key, mask) in loop_last(events):
                if mask & selectors.EVENT_READ:
                    data = decode(read(fileno, 1024 * 4), final=final and last)
                    if not data:
                        break
                    for event in parser.feed(data):
                        self.process_message(event)
            for event in parser.tick():
                self.process_message(event)

        try:
            # (the wake byte stays until disable_input has joined this thread: a stop seen late is still seen)
            while not (self.exit_event.is_set() or self._stopping):
                pending = parser._timeout_time is not None
                process(selector.select(PENDING_TICK_S if pending else None))
            selector.unregister(fileno)
            process(selector.select(PENDING_TICK_S), final=True)
        finally:
            selector.close()
            try:
                for _ in parser.feed(""):
                    pass
            except Exception:  # noqa: BLE001 - as Textual: the input ends either way
                pass

    def disable_input(self) -> None:
        """Textual's, with the input thread woken first (it would otherwise wait for a key); the
        wake byte is taken back once the thread has ended (a resumed app starts another)."""
        self._stopping = True
        try:
            os.write(self._wake[1], b"x")
        except OSError:  # (a byte is there already)
            pass
        try:
            super().disable_input()
        finally:
            try:
                os.read(self._wake[0], 64)
            except OSError:
                pass
            self._stopping = False

    def close(self) -> None:
        super().close()
        for fd in self._wake:
            try:
                os.close(fd)
            except OSError:
                pass
