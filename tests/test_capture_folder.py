"""A captures folder (TUIMON_CAPTURE_DIR) that cannot be used: `tuimon capture` says why with exit
code 2, and `c` says it on the capture line; neither raises (issue 43, item 10). A real job."""

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import STEPPING_JOB, tuimon_cmd
from tests.fake_nvml import FakeNvml
from tuimon.monitor.session import LiveSession
from tuimon.sources.nvml import DeviceSampler
from tuimon.ui.app import make_app
from tuimon.ui.widgets import Panel

LOOP = STEPPING_JOB


@pytest.fixture
def job(tmp_path):
    """A job with the probe and steps; its own captures folder is a good one."""
    env = {**os.environ, "TUIMON_CAPTURE_DIR": str(tmp_path / "job-caps")}
    p = subprocess.Popen([sys.executable, "-c", LOOP], stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout.readline() == "up\n"
    yield p
    p.kill()
    p.wait()


def folders(tmp_path):
    """(TUIMON_CAPTURE_DIR, what tuimon says of it) for folders that cannot be used."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    return [(a_file, "is not a folder"), (a_file / "sub", "is not a folder"),
            ("/proc/tuimon-none", "cannot be used: No such file or directory")]


def test_tuimon_capture_says_why_the_folder_cannot_be_used(tmp_path, job):
    for folder, says in folders(tmp_path):
        p = subprocess.run(tuimon_cmd("capture", job.pid), capture_output=True, text=True, timeout=60,
                           env={**os.environ, "TUIMON_CAPTURE_DIR": str(folder)})
        assert p.returncode == 2 and p.stderr == f"tuimon: the captures folder {folder} (TUIMON_CAPTURE_DIR) {says}\n", \
            (folder, p.returncode, p.stderr)
    missing = tmp_path / "missing" / "caps"  # (a folder that is not there yet is made, private)
    p = subprocess.run(tuimon_cmd("capture", job.pid), capture_output=True, text=True, timeout=60,
                       env={**os.environ, "TUIMON_CAPTURE_DIR": str(missing)})
    assert p.returncode == 0 and f"asked PID {job.pid} for a" in p.stdout, p.stderr
    assert missing.is_dir() and missing.stat().st_mode & 0o777 == 0o700


def capture_line(app) -> str:
    last = app.screen.query_one("#capture", Panel)._last
    return last.plain if last is not None else ""


async def until(pilot, what, pred, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        await pilot.pause(0.05)
        if pred():
            return
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.asyncio
async def test_c_says_on_the_capture_line_why_the_folder_cannot_be_used(tmp_path, job, monkeypatch):
    [(folder, says), *_] = folders(tmp_path)
    monkeypatch.setenv("TUIMON_CAPTURE_DIR", str(folder))
    app = make_app(LiveSession(job.pid, 0.2, devices=DeviceSampler(FakeNvml())), "test")
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, "the capture line", lambda: "c: capture 10 steps" in capture_line(app))
        await pilot.press("c")
        await until(pilot, "the refusal", lambda: "c refused" in capture_line(app))
        assert f"c refused: the captures folder {folder} (TUIMON_CAPTURE_DIR) {says}" in capture_line(app)
        monkeypatch.setenv("TUIMON_CAPTURE_DIR", str(tmp_path / "caps"))  # mended: c takes a window again
        await pilot.press("c")
        await until(pilot, "the window", lambda: "capture 1" in capture_line(app))
        assert "refused" not in capture_line(app)
