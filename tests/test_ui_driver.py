"""The Linux driver's input thread (tuimon/ui/driver.py): asleep until a key, keys as Textual reads
them (a lone escape too), and woken when input stops, with no key."""

import asyncio
import os
import pty
import selectors
import signal
import threading
import tty

from textual import events

from tests.conftest import wait_for
from tuimon.ui import driver as D


def test_the_input_thread_sleeps_until_a_key_and_wakes_to_stop(monkeypatch):
    selects: list[float | None] = []

    class Counting(selectors.SelectSelector):
        def select(self, timeout=None):
            selects.append(timeout)
            return super().select(timeout)

    class Keys(D.QuietLinuxDriver):
        def process_message(self, message):
            got.append(message)

    monkeypatch.setattr(D.selectors, "SelectSelector", Counting)
    got: list = []
    saved = {s: signal.getsignal(s) for s in (signal.SIGTSTP, signal.SIGCONT, signal.SIGWINCH)}
    master, slave = pty.openpty()
    tty.setraw(slave)  # (as Textual's application mode: keys as typed, not lines)

    async def make():
        return Keys(None, mouse=False)

    try:
        drv = asyncio.run(make())
        drv.fileno = slave
        thread = drv._key_thread = threading.Thread(target=drv.run_input_thread, daemon=True)
        thread.start()
        threading.Event().wait(1.0)
        assert selects == [None]  # one wait, no timeout (Textual's thread: ten selects a second)
        os.write(master, b"\x1b")  # a lone escape: a key once Textual's tick says nothing follows
        wait_for(lambda: any(isinstance(m, events.Key) and m.key == "escape" for m in got), what="escape")
        assert D.PENDING_TICK_S in selects
        os.write(master, b"q")
        wait_for(lambda: any(isinstance(m, events.Key) and m.key == "q" for m in got), what="q")
        guard_fired = threading.Event()
        guard = threading.Timer(10, lambda: (guard_fired.set(), os.write(master, b"z")))
        guard.start()
        drv.disable_input()  # (joins the thread: woken by the driver's pipe, not by a key)
        guard.cancel()
        assert not thread.is_alive() and not guard_fired.is_set()
        # Resumed (Ctrl+Z, then fg: Textual starts another input thread): it reads keys, and stops again.
        thread = drv._key_thread = threading.Thread(target=drv.run_input_thread, daemon=True)
        thread.start()
        os.write(master, b"w")
        wait_for(lambda: any(isinstance(m, events.Key) and m.key == "w" for m in got), what="w after resuming")
        drv.disable_input()
        assert not thread.is_alive()
        drv.close()
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
        os.close(master)
        os.close(slave)
