"""The main thread's work for one cycle of the main screen, measured in-process and without a terminal: a
recording's cycles fed one by one to the app (Textual's headless run, 120x40), each followed by the screen's
refresh, its update rendered as the terminal would get it. Deterministic (no pacing: the screen's clock is the
recording's), so two builds compare by thread CPU, not by a noisy machine's wall time.

    python benchmarks/ui_cycle_cost.py [--fixture tests/fixtures/h100_demo_v2.jsonl] [--passes 5] [--size 120x40]

Run it from a checkout (`cd DIR && python benchmarks/ui_cycle_cost.py`: that checkout's tuimon) for each build,
alternating. Prints, per cycle (medians over the passes of each pass's mean over the fixture's cycles): the
cycle's handling (`apply_cycle`: the state, the view, the panels' text and strips), the compositor's refresh
(`render_update`), the update's escape sequences (`render_segments`), their bytes, and all of a cycle (the
three, with Textual's messages between them)."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import types

sys.path.insert(0, os.getcwd())

from textual._compositor import Compositor  # noqa: E402

import tuimon.ui.screens.main as main_screen  # noqa: E402
from tuimon.monitor.state import MonitorState  # noqa: E402
from tuimon.sources.recording import Recording  # noqa: E402
from tuimon.ui.app import make_app  # noqa: E402

tt = time.thread_time_ns


class Clock:
    """The screen's time.monotonic: the recording's."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def one_pass(cycles, size: tuple[int, int]) -> dict[str, float]:
    clock = Clock()
    main_screen.time = types.SimpleNamespace(monotonic=clock.monotonic)  # type: ignore[assignment]
    got = {"apply_cycle": 0, "render_update": 0, "render_segments": 0, "bytes": 0, "cycle": 0}
    original = Compositor.render_update

    def render_update(self, *a, **k):
        t = tt()
        update = original(self, *a, **k)
        t1 = tt()
        if update is not None and measuring:
            text = update.render_segments(app.console)
            got["bytes"] += len(text.encode())
            got["render_segments"] += tt() - t1
        if measuring:
            got["render_update"] += t1 - t
        return update

    Compositor.render_update = render_update  # type: ignore[method-assign]
    app = make_app(None, "replay", MonitorState())
    measuring = False

    async def run():
        nonlocal measuring
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            warm = 3
            for k, c in enumerate(cycles):
                clock.now = c.t / 1e9
                measuring = k >= warm
                t0 = tt()
                app.apply_cycle(c)
                t1 = tt()
                await pilot.pause()
                if measuring:
                    got["apply_cycle"] += t1 - t0
                    got["cycle"] += tt() - t0

    try:
        asyncio.run(run())
    finally:
        Compositor.render_update = original  # type: ignore[method-assign]
    n = len(cycles) - 3
    return {k: v / n for k, v in got.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fixture", default="tests/fixtures/h100_demo_v2.jsonl")
    p.add_argument("--passes", type=int, default=5)
    p.add_argument("--size", default="120x40")
    a = p.parse_args()
    size = tuple(map(int, a.size.split("x")))
    cycles = list(Recording(a.fixture).cycles())
    runs = [one_pass(cycles, size) for _ in range(a.passes)]  # type: ignore[arg-type]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    spread = {k: (min(r[k] for r in runs), max(r[k] for r in runs)) for k in runs[0]}
    print(f"{os.getcwd()}: {a.fixture}, {len(cycles)} cycles, {a.passes} passes, per cycle (median, min..max):")
    for k in ("apply_cycle", "render_update", "render_segments", "cycle"):
        print(f"  {k:16s} {med[k] / 1e3:8.1f} us  ({spread[k][0] / 1e3:.1f}..{spread[k][1] / 1e3:.1f})")
    print(f"  {'bytes':16s} {med['bytes']:8.1f}")


if __name__ == "__main__":
    main()
