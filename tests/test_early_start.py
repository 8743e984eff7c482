"""The TUI starts its session before Textual loads (the first poll, NVML's start among it, runs
while the UI imports and composes): cycles polled meanwhile are kept, drawn at mount, and every
later one goes straight to the app; a session nobody took over is stopped."""

import threading
import time

import pytest

from tests.conftest import ROOT, wait_for
from tuimon.monitor.session import EarlyStart, ReplaySession
from tuimon.sources.recording import Recording
from tuimon.ui.app import make_app

H100 = str(ROOT / "tests" / "fixtures" / "h100_demo_v2.jsonl")


def test_cycles_before_the_take_over_are_kept_in_order_and_none_is_lost():
    every = [c.t for c in Recording(H100).cycles()]
    session = ReplaySession(H100, speed=20)  # (paced: a few cycles before the take-over, the rest after)
    early = EarlyStart(session)
    wait_for(lambda: session.played >= 3, what="cycles played before the take-over")
    got, ended = [], threading.Event()
    kept = early.take_over(lambda c: got.append(c.t), ended.set)
    assert len(kept) >= 3 and [c.t for c in kept] == every[:len(kept)]
    assert ended.wait(30), "the replay's end reached the new consumer"
    assert [c.t for c in kept] + got == every
    early.stop_unless_taken()
    assert not session._stop.is_set()  # (taken: its consumer stops it)


def test_a_session_nobody_took_is_stopped():
    session = ReplaySession(H100, speed=1)
    early = EarlyStart(session)
    early.stop_unless_taken()
    assert session._stop.is_set()
    session._thread.join(5)
    assert not session._thread.is_alive()


@pytest.mark.asyncio
async def test_the_app_draws_what_was_polled_while_it_loaded():
    session = ReplaySession(H100, speed=20)
    early = EarlyStart(session)
    wait_for(lambda: session.played >= 2, what="cycles played before the app")
    app = make_app(session, "replay", early=early)
    async with app.run_test(size=(120, 40)) as pilot:
        assert app.state.training is not None  # (applied at mount, before any later cycle)
        await pilot.pause()
        end = time.monotonic() + 30
        while not session.finished and time.monotonic() < end:
            await pilot.pause(0.1)
        assert session.finished
        await pilot.pause(0.2)
        assert app.state.training.steps == list(Recording(H100).cycles())[-1].training.steps
