"""The Textual UI with run_test() and Pilot, fed from the real H200 recording and a real segment."""

import gc
import os
import time

import pytest
from rich.text import Text
from textual.widgets import DataTable

from tests.conftest import ROOT
from tuimon.channel import SegmentReader, SegmentWriter
from tuimon.channel import layout as L
from tuimon.channel.meta import JobMeta
from tuimon.model import Cycle, ProcessSample, ProcRow, TrainingSnapshot
from tuimon.monitor.state import MonitorState
from tuimon.monitor.training import TrainingView
from tuimon.sources.channel import ChannelSource
from tuimon.ui.app import make_app
from tuimon.ui.replay_frames import state_from_recording
from tuimon.ui.screens import GpuScreen, HelpScreen, MainScreen, RangesScreen
from tuimon.ui.widgets import Panel

FIXTURE = str(ROOT / "tests" / "fixtures" / "h200_demo.jsonl")
TWO_GPUS = str(ROOT / "tests" / "fixtures" / "h200x2_gpu1.jsonl")  # the demo on GPU 1 of 2 (real)


def text(app, wid):
    return app.screen.query_one(wid, Panel)._last.plain


async def settle(app, pilot):
    await pilot.pause()
    app.redraw()
    await pilot.pause()


@pytest.mark.asyncio
async def test_the_cyclic_gc_the_start_turned_off_is_on_again_once_the_app_has_painted():
    """cli.tui turns the GC off for the start (the first frame waited on its passes); the app turns
    it on after its first paint, so the monitor's hours never run without it."""
    gc.disable()
    try:
        app = make_app(None, "replay", state_from_recording(FIXTURE))
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            assert gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.asyncio
async def test_main_screen_from_the_recording():
    app = make_app(None, "replay", state_from_recording(FIXTURE))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        assert isinstance(app.screen, MainScreen)
        assert "PID 2348" in text(app, "#header") and "step 1,419" in text(app, "#header")
        v = text(app, "#verdict")
        # SM activity: the mean over the span of time the step window covers (the latest sample reads 39.0%)
        assert "INPUT-BOUND" in v and "data wait 54% of step time" in v and "SM activity 40%" in v
        assert "→ the loop waits for batches" in v and "high confidence" in v
        gpus = text(app, "#gpus")
        assert "GPU 0 NVIDIA H200" in gpus and "◆ target" in gpus and "318/700 W" in gpus
        assert "SM active" in gpus and "Tensor" in gpus and "DRAM bw" in gpus
        assert "processes 2348 3.5 GiB SM 44%" in gpus
        assert "p50 20.9" in text(app, "#steps")
        assert "data wait 54%" in text(app, "#breakdown") and "unaccounted" in text(app, "#breakdown")
        assert "workers 2" in text(app, "#process")


@pytest.mark.asyncio
async def test_a_target_on_the_second_of_two_gpus():
    app = make_app(None, "replay", state_from_recording(TWO_GPUS))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        gpus = text(app, "#gpus")
        assert gpus.startswith("GPU 1 NVIDIA H200  ◆ target") and "GPU 0" not in gpus
        assert "processes 562 3.5 GiB" in gpus and "1 other GPU(s) not used by the target" in gpus
        await pilot.press("g")
        await settle(app, pilot)
        title = lambda: str(app.screen.query_one("#gpu-title").render())  # noqa: E731
        assert title().startswith("GPU 1 of 2")  # the detail opens on the target's GPU
        assert "◆ target" in app.screen.query_one("#gpu-summary", Panel)._last.plain
        await pilot.press("n")
        await settle(app, pilot)
        assert title().startswith("GPU 0 of 2")
        assert "processes: none" in app.screen.query_one("#gpu-summary", Panel)._last.plain  # idle, no jobs


@pytest.mark.asyncio
async def test_keys_and_screens():
    app = make_app(None, "replay", state_from_recording(FIXTURE))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        await pilot.press("r")
        await settle(app, pilot)
        assert isinstance(app.screen, RangesScreen)
        table = app.screen.query_one(DataTable)
        names = [str(table.get_row_at(i)[0]).strip() for i in range(table.row_count)]
        assert names[0] == "sync" and set(names) == {"sync", "backward", "forward", "optimizer", "h2d"}
        for _ in range(4):  # share, count, mean, p95 -> name
            await pilot.press("s")
        names = [str(table.get_row_at(i)[0]).strip() for i in range(table.row_count)]
        assert names == sorted(names)
        await pilot.press("escape")
        await pilot.press("g")
        await settle(app, pilot)
        assert isinstance(app.screen, GpuScreen)
        assert "samples ago" in app.screen.query_one("#gpu-plot", Panel)._last.plain
        await pilot.press("escape", "question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape", "p")
        await settle(app, pilot)
        assert "PAUSED" in text(app, "#header")
        cycles = app.state.cycles
        app.apply_cycle(Cycle(t=1, training=TrainingSnapshot(pid=2348, steps=99999)))
        assert app.state.cycles == cycles + 1 and "PAUSED" in text(app, "#header")
        assert "step 1,419" in text(app, "#header")  # paused: the display holds
        await pilot.press("p")
        await settle(app, pilot)
        assert "PAUSED" not in text(app, "#header")
        await pilot.press("c")
        await pilot.pause()
        assert any("nothing to capture here" in str(n.message) for n in app._notifications)  # a replay
        await pilot.press("q")
    assert not app.is_running


@pytest.mark.asyncio
async def test_80x24_nothing_overlaps_and_smaller_terminals_scroll():
    for size in ((80, 24), (80, 14)):
        app = make_app(None, "replay", state_from_recording(FIXTURE))
        async with app.run_test(size=size) as pilot:
            await settle(app, pilot)
            regions = [app.screen.query_one(w).region for w in ("#header", "#verdict", "#body")]
            panels = [app.screen.query_one(w).virtual_region for w in ("#gpus", "#steps", "#breakdown", "#process")]
            for a, b in [*zip(regions, regions[1:], strict=False), *zip(panels, panels[1:], strict=False)]:
                assert a.bottom <= b.y
            assert all(r.right <= 80 for r in regions + panels)
            body = app.screen.query_one("#body")
            if size == (80, 14):
                assert body.virtual_size.height > body.size.height  # more than fits: it scrolls
                assert app.focused is None  # (focusing the body would restyle every panel in it)
                await pilot.press("end")  # the screen passes its scroll keys to the body
                await pilot.pause()
                assert body.scroll_y > 0
                await pilot.press("up")
                await pilot.pause()
                assert 0 < body.scroll_y < body.max_scroll_y


@pytest.mark.asyncio
async def test_untrusted_names_are_shown_literally(shm_dir):
    """A range named with Rich markup and an escape sequence, through a real segment."""
    w = SegmentWriter.create(JobMeta(argv=("train.py", "[red]argv[/]")), 256)
    hostile = "[bold red]x[/] \x1b[2J"
    nid = w.intern(hostile)
    for k in range(1, 8):
        w.emit(L.RANGE, 0, nid, 1, k, k * 100, k * 100 + 50, 0.0)
        w.emit(L.STEP, 0, 0, 1, k, (k - 1) * 100 + 100, k * 100 + 100, 0.0)
    view = TrainingView(ChannelSource(SegmentReader(w.path)))
    view.poll()
    state = MonitorState()
    state.apply(Cycle(t=1, process=ProcessSample(pid=os.getpid(), procs=[ProcRow(pid=1, role="target",
                                                                                 name="[blink]proc[/]",
                                                                                 cpu_percent=1.0, rss=1,
                                                                                 threads=1,
                                                                                 state="running")]),
                      training=view.snapshot()))
    app = make_app(None, "test", state)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        header = app.screen.query_one("#header", Panel)._last
        assert "[red]argv[/]" in header.plain
        process = app.screen.query_one("#process", Panel)._last
        assert "[blink]proc[/]" in process.plain
        assert "[bold red]x[/] \\x1b[2J" in text(app, "#breakdown")
        assert "\x1b" not in text(app, "#breakdown")
        await pilot.press("r")
        await settle(app, pilot)
        cell = app.screen.query_one(DataTable).get_row_at(0)[0]
        assert str(cell) == "[bold red]x[/] \\x1b[2J"
        assert not any("red" in str(s.style) for s in cell.spans)  # no markup was interpreted


@pytest.mark.asyncio
async def test_a_target_that_exits_keeps_its_last_numbers():
    state = state_from_recording(FIXTURE)
    state.apply(Cycle(t=1, process=ProcessSample(pid=2348, t=1, alive=False, exited_at=0.0, exit_code=3)))
    app = make_app(None, "replay", state)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        assert "PROCESS EXITED" in text(app, "#header") and "(exited with code 3)" in text(app, "#header")
        verdict = text(app, "#verdict")  # (exited, and what its last window was while it ran)
        assert "EXITED (CODE 3)" in verdict and "while it ran: input-bound" in verdict, verdict
        assert "p50 20.9" in text(app, "#steps")


@pytest.mark.asyncio
async def test_c_takes_a_capture_of_a_real_job_and_shows_what_it_found(shm_dir, tmp_path, monkeypatch):
    import subprocess
    import sys

    from tests.conftest import tuimon_cmd
    from tests.fake_nvml import FakeNvml
    from tuimon.monitor.session import LiveSession
    from tuimon.sources.nvml import DeviceSampler
    from tuimon.ui.screens import CapturesScreen

    monkeypatch.setenv("TUIMON_CAPTURE_DIR", str(tmp_path / "caps"))
    planted = str(ROOT / "tests" / "workloads" / "planted_wait.py")
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, planted, 3000, 0.02, 0.004),
                           stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "training"
        fake = FakeNvml()
        fake.fail["nvmlInit"] = 12
        app = make_app(LiveSession(job.pid, 0.2, devices=DeviceSampler(fake)), "test")
        async with app.run_test(size=(120, 40)) as pilot:
            end = time.monotonic() + 30
            while time.monotonic() < end:
                await pilot.pause(0.05)
                if "c: capture 10 steps with torch.profiler" in (app.screen.query_one("#capture", Panel)._last or Text("")).plain:
                    break
            await pilot.press("minus", "minus", "minus", "minus", "minus")  # 10 -> 5
            assert app.capture_steps == 5
            await pilot.press("c")
            end = time.monotonic() + 60  # the window, torch's export, then the summary's own process
            while time.monotonic() < end:
                await pilot.pause(0.05)
                if "last capture 1:" in text(app, "#capture") and "top operators" in text(app, "#capture"):
                    break
            shown = text(app, "#capture")
            assert "last capture 1: steps" in shown and ".pt.trace.json.gz" in shown, shown
            first, last = map(int, shown.split("last capture 1: steps ")[1].split()[0].split(".."))
            assert last - first + 1 == 5
            app._set_steps(100)  # (~2.5 s of steps: on a loaded machine a 5-step window could end between two keys)
            await pilot.press("c")
            await pilot.press("c")  # while the first still runs: refused, one at a time
            for _ in range(40):  # (the notification is a message: handled on a later turn of the loop)
                await pilot.pause(0.05)
                if any("already" in str(n.message) for n in app._notifications):
                    break
            assert any("already" in str(n.message) for n in app._notifications), [n.message for n in app._notifications]
            await pilot.press("l")
            await settle(app, pilot)
            assert isinstance(app.screen, CapturesScreen)
            assert app.screen.query_one(DataTable).row_count >= 1
    finally:
        job.kill()
        job.wait()


H100 = str(ROOT / "tests" / "fixtures" / "h100_demo_v2.jsonl")


def h100_baseline(scale: float = 1.0, upto: int = 18):
    """A baseline from the first half of the real H100 recording; scale < 1 makes it a faster run
    than the recording (so the recording's end reads as a regression: for drawing the alert)."""
    from dataclasses import replace

    from tuimon.monitor.baseline import BaselineBuilder
    from tuimon.sources.recording import Recording

    b = BaselineBuilder("recording h100_demo_v2.jsonl")
    for k, c in enumerate(Recording(H100).cycles()):
        if k < upto:
            b.add(c)
    base = b.build()
    return replace(base, step_ms=[v * scale for v in base.step_ms], batch_ms=[v * scale for v in base.batch_ms],
                   steps_per_s=base.steps_per_s / scale,
                   throughput_per_s={k: v / scale for k, v in base.throughput_per_s.items()},
                   step_time_ms=replace(base.step_time_ms, mean=base.step_time_ms.mean * scale),
                   phases=[replace(p, mean_ms=p.mean_ms * (scale if p.name == "data" else 1)) for p in base.phases])


@pytest.mark.asyncio
async def test_the_baseline_panel_shows_deltas_and_the_alert():
    app = make_app(None, "replay", state_from_recording(H100, baseline=("good.json", h100_baseline())))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        panel = app.screen.query_one("#baseline", Panel)
        assert panel.display
        line = text(app, "#baseline")
        assert line.startswith(" AS BASELINE ") and "no regression from good.json (bar 1.1x, p < 0.002)" in line
        assert "mean step 2" in line and "steps/s" in line and "p50 " in line and "p95 " in line
    app = make_app(None, "replay", state_from_recording(H100, baseline=("good.json", h100_baseline(0.7))))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        line = text(app, "#baseline")
        assert line.startswith(" REGRESSION ") and "slower than good.json" in line
        assert "data grew most" in line and "p < 0.001" in line and "mean step 2" in line
    app = make_app(None, "replay", state_from_recording(H100))  # no baseline: no panel
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        assert not app.screen.query_one("#baseline", Panel).display


@pytest.mark.asyncio
async def test_the_breakdown_is_built_once_a_window_view_and_always_shows_the_current_one(monkeypatch):
    """The breakdown is drawn from the window view alone: built again only when that view (or the
    width) changes, and what it shows is always the current window view's, at any width."""
    import types

    import tuimon.ui.screens.main as main_screen
    from tuimon.sources.recording import Recording
    from tuimon.ui.panels.breakdown import breakdown_panel

    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(main_screen, "time", types.SimpleNamespace(monotonic=lambda: clock.now))
    built = []
    monkeypatch.setattr(main_screen, "breakdown_panel", lambda *a, **k: built.append(a[0]) or breakdown_panel(*a, **k))
    app = make_app(None, "replay", MonitorState())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        for k, cycle in enumerate(Recording(FIXTURE).cycles()):
            clock.now = cycle.t / 1e9
            app.apply_cycle(cycle)
            await pilot.pause()
            screen, panel = app.screen, app.screen.query_one("#breakdown", Panel)
            assert panel._last == breakdown_panel(screen._window, panel.text_width, plain=app.no_color)
            if k == 20:
                await pilot.resize_terminal(90, 30)
                await pilot.pause()
                app.redraw()
                await pilot.pause()
                assert panel._last == breakdown_panel(screen._window, panel.text_width, plain=app.no_color)
        assert len(built) < 0.5 * (k + 1), (len(built), k + 1)
