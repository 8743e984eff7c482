"""`i` in the TUI: a process attached without the probe is offered it (what it does and costs, one
line), a second `i` or `y` loads it on a worker thread, and the line says what happened; real
processes, real ptrace (issue 40)."""

import os
import signal
import subprocess
import sys
import time

import pytest
from rich.console import Console
from rich.text import Text

from tests.conftest import ROOT, wait_for
from tests.fake_nvml import FakeNvml
from tuimon.inject import WHAT_IT_DOES, Injected, Outcome, loader_path
from tuimon.monitor.session import LiveSession
from tuimon.sources.nvml import DeviceSampler
from tuimon.ui.app import make_app
from tuimon.ui.panels.probe import ProbeLoad, probe_line, probe_result
from tuimon.ui.replay_frames import state_from_recording
from tuimon.ui.screens import MainScreen
from tuimon.ui.widgets import Keys, Panel

LOOP = str(ROOT / "tests" / "workloads" / "plain_loop.py")
FIXTURE = str(ROOT / "tests" / "fixtures" / "h100_demo_v2.jsonl")


def plain_env():
    """The job's environment: nothing of tuimon's (no TUIMON_* variable, no PYTHONPATH)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TUIMON_") and k != "PYTHONPATH"}


def no_nvml():
    fake = FakeNvml()
    fake.fail["nvmlInit"] = 12  # (no GPU here: the GPU panel says so; the rest goes on)
    return DeviceSampler(fake)


def shown(app, wid):
    last = app.screen.query_one(wid, Panel)._last
    return last.plain if last is not None else ""


async def wait_until(pilot, pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        await pilot.pause(0.1)
    raise AssertionError(f"timed out waiting for {what}")


# -- the line's words -------------------------------------------------------------------------------


def test_the_offer_says_what_loading_does_and_costs_in_one_line():
    line = probe_line(ProbeLoad("offered", 812), 120)
    assert line.plain == f"i: {WHAT_IT_DOES}" and "\n" not in line.plain and line.cell_len <= 120
    assert "ptrace" in line.plain and "1% of step time" in line.plain
    assert len(probe_line(ProbeLoad("offered", 812)).plain) <= 76  # (one line at 80 columns)
    assert probe_line(ProbeLoad("confirm", 812)).plain == "i again (or y) within 5 s loads tuimon's probe into PID 812"
    narrow = probe_line(ProbeLoad("failed", 812, "x " * 400), 40)
    assert len(narrow.wrap(Console(), 40)) <= 3 and narrow.plain.endswith("…")


def test_outcomes_become_the_lines_result():
    loaded = Outcome(812, loaded=Injected(812, "/dev/shm/x", 0.19))
    assert probe_result(812, [loaded]) == ProbeLoad("loaded", 812, "probe loaded into PID 812 in 0.19 s")
    refused = Outcome(812, why="process 812 has not imported torch: ...")
    done = probe_result(812, [refused])
    assert done.state == "failed" and probe_line(done).plain == "probe not loaded: process 812 has not imported torch: ..."
    two = probe_result(800, [loaded, Outcome(813, loaded=Injected(813, "/dev/shm/y", 0.25))])
    assert two == ProbeLoad("loaded", 800, "probe loaded into PIDs 812, 813 in 0.25 s")
    mixed = probe_result(800, [loaded, Outcome(813, why="the injector failed: EPERM")])
    assert mixed.state == "failed" and mixed.words == ("PID 813: the injector failed: EPERM · probe loaded into PID 812 "
                                                       "in 0.19 s")
    assert probe_result(800, [Outcome(812, why="queued", pending=True)]).state == "pending"


@pytest.mark.asyncio
async def test_a_replay_is_not_offered_the_probe():
    app = make_app(None, "replay", state_from_recording(FIXTURE))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.redraw()
        await pilot.press("i", "i")
        await pilot.pause()
        assert app.probe is None and not app.screen.query_one("#probe", Panel).display
        assert " load probe" not in app.screen.query_one(Keys)._last.plain


# -- real processes ---------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_i_then_y_on_a_python_without_torch_shows_the_refusal_and_the_app_goes_on():
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=plain_env())
    app = make_app(LiveSession(job.pid, 0.2, devices=no_nvml(), outside=True), "attached")
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: "i: load tuimon's probe" in shown(app, "#probe"), 30, "the offer")
            assert shown(app, "#probe") == f"i: {WHAT_IT_DOES}"
            await wait_until(pilot, lambda: "i load probe" in app.screen.query_one(Keys)._last.plain, 10,
                             "the key in the footer")  # (in the footer while it applies; drawn a cycle after the line)
            await pilot.press("i")
            await pilot.pause()
            assert shown(app, "#probe").startswith("i again (or y)")
            await pilot.press("y")
            await wait_until(pilot, lambda: "has not imported torch" in shown(app, "#probe"), 30, "the refusal")
            line = shown(app, "#probe")
            assert line.startswith(f"probe not loaded: process {job.pid} has not imported torch"), line
            assert "Traceback" not in line and app.probe is not None and app.probe.state == "failed"
            await pilot.pause(0.5)  # (a few more cycles: the app goes on, the line stays)
            assert app.is_running and isinstance(app.screen, MainScreen)
            assert "has not imported torch" in shown(app, "#probe")
            assert job.poll() is None  # the job untouched
    finally:
        job.kill()
        job.wait()


@pytest.mark.asyncio
async def test_an_unconfirmed_i_is_offered_again_and_a_bug_in_the_load_is_said_not_raised(monkeypatch):
    import tuimon.inject
    import tuimon.ui.app as app_module

    monkeypatch.setattr(app_module, "CONFIRM_S", 0.3)

    def bug(*a, **kw):
        raise RuntimeError("boom")
        yield

    monkeypatch.setattr(tuimon.inject, "load_each", bug)
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=plain_env())
    app = make_app(LiveSession(job.pid, 0.2, devices=no_nvml(), outside=True), "attached")
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: app.probe is not None, 30, "the offer")
            await pilot.press("i")
            assert app.probe.state == "confirm"
            await wait_until(pilot, lambda: app.probe.state == "offered", 5, "the offer again")
            await pilot.press("y")  # (no confirmation asked: y does nothing)
            await pilot.pause(0.3)
            assert app.probe.state == "offered" and shown(app, "#probe").startswith("i: load")
            await pilot.press("i", "y")
            await wait_until(pilot, lambda: app.probe.state == "failed", 10, "the load's end")
            assert shown(app, "#probe") == "probe not loaded: RuntimeError: boom" and app.is_running
    finally:
        job.kill()
        job.wait()


@pytest.mark.asyncio
@pytest.mark.skipif(loader_path() is None, reason="tuimon's loader library was not built (no C compiler)")
async def test_quitting_while_the_load_waits_for_the_jobs_main_thread_ends_the_wait(monkeypatch):
    """A main thread asleep runs no Python: the load is queued (up to 15 s of waiting); the app's end
    ends the wait at once, and the load stays queued in the job."""
    import tuimon.inject

    real, ended = tuimon.inject.load_each, []

    def timed(*a, **kw):
        yield from real(*a, **kw)
        ended.append(time.monotonic())

    monkeypatch.setattr(tuimon.inject, "load_each", timed)
    job = subprocess.Popen([sys.executable, "-c", "import torch, time; print('ready', flush=True); time.sleep(60)"],
                           env=plain_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "ready"
        app = make_app(LiveSession(job.pid, 0.2, devices=no_nvml(), outside=True), "attached")
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: app.probe is not None, 30, "the offer")
            await pilot.press("i", "i")
            await pilot.pause(1.0)
            assert app.probe.state == "loading" and not ended
            quit_at = time.monotonic()
        wait_for(lambda: ended, timeout=5, what="the load's wait ended by the quit")
        assert ended[0] - quit_at < 3 and job.poll() is None
    finally:
        job.kill()
        job.wait()


@pytest.mark.asyncio
@pytest.mark.skipif(loader_path() is None, reason="tuimon's loader library was not built (no C compiler)")
async def test_i_i_loads_the_probe_into_a_plain_torch_loop_and_its_steps_show(tmp_path):
    ready = tmp_path / "ready"
    job = subprocess.Popen([sys.executable, LOOP, "--seconds", "50", "--truth", str(tmp_path / "t.json"),
                            "--ready", str(ready)],
                           env=plain_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)  # (its DataLoader workers die with it: killed alone, a
    # worker serving a shared file descriptor prints multiprocessing's EOFError traceback into this stderr)
    app = make_app(LiveSession(job.pid, 0.5, devices=no_nvml(), outside=True), "attached")
    try:
        # the loop stepping, not only torch mapped: a job still importing puts the load off (test_inject)
        wait_for(ready.exists, timeout=90, what="50 steps")
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: app.probe is not None, 30, "the offer")
            assert app.state.view().training is None
            await pilot.press("i", "i")
            if app.probe.state == "loading":  # (a fast load may be done already)
                assert shown(app, "#probe") == f"loading the probe into PID {job.pid}…"
            await wait_until(pilot, lambda: app.probe is None or app.probe.state != "loading", 30, "the load")
            assert app.probe is not None and app.probe.state == "loaded", app.probe
            assert shown(app, "#probe").startswith(f"probe loaded into PID {job.pid} in ")
            await wait_until(pilot, lambda: (t := app.state.view().training) is not None and t.steps > 0, 30,
                             "steps from the probe")
            assert f"PID {job.pid}" in shown(app, "#header") and "step " in shown(app, "#header")
            assert " load probe" not in (app.screen.query_one(Keys)._last or Text("")).plain  # (no longer offered)
        assert job.poll() is None  # the job goes on
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        _, err = job.communicate()
    assert "Traceback" not in err, err
