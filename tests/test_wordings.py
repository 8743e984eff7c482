"""What the commands say at their edges (issue 43, item 27): one step is "1 step", a reader that
leaves `record -o -` ends it quietly, metrics served on every interface are said to be. Real
commands and a real job."""

import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import STEPPING_JOB, tuimon_cmd, wait_for
from tuimon.capture.cost import expected_pause
from tuimon.model import WindowCost
from tuimon.monitor.session import LiveSession
from tuimon.monitor.state import MonitorState
from tuimon.ui.panels.capture import capture_panel

LOOP = STEPPING_JOB


@pytest.fixture
def job(tmp_path, monkeypatch):
    monkeypatch.setenv("TUIMON_CAPTURE_DIR", str(tmp_path / "caps"))
    p = subprocess.Popen([sys.executable, "-c", LOOP], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "up\n"
    yield p
    p.kill()
    p.wait()


def test_one_step_is_one_step(job):
    p = subprocess.run(tuimon_cmd("capture", job.pid, "--steps", 1), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "capture of 1 step (request 1)" in p.stdout, (p.stdout, p.stderr)
    session, state = LiveSession(job.pid, 0.2), MonitorState()
    try:
        wait_for(lambda: state.apply(c := session.poll()) is None and c.training is not None and c.training.steps
                 and c.capture is not None and not c.capture.busy, what="the job's steps and its window's end")
        assert "c: capture 1 step with" in capture_panel(state.view(), 1).plain
    finally:
        session.stop()
    cost = WindowCost(normal_steps=1, worst_normal_ms=10.0, typical_ms=10.0, window_steps=5, steps=6, worst_ms=40.0,
                      worst_step=7, over=1, ratio=4.0, lost_ms=500.0)
    assert expected_pause(cost, 1) == "a window of 1 step will pause this job ~100 ms (4.0x its worst step last time)"


def test_a_reader_that_leaves_record_to_standard_output_ends_it_quietly(sleeper):
    """`tuimon record PID -o - | head -1`, as `--plain | head`."""
    p = subprocess.Popen(tuimon_cmd("record", sleeper.pid, "-o", "-", "--interval", 0.2), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith('{"format":"tuimon-recording"')
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=30) == 0, err
    assert [line for line in err.splitlines() if "recording without GPU metrics" not in line] == [], err


@pytest.mark.parametrize("addr, warned", [("0.0.0.0", True), ("::", True), ("127.0.0.1", False)])
def test_metrics_on_every_interface_are_said_to_be(addr, warned):
    p = subprocess.Popen(tuimon_cmd("export", "--port", 0, "--addr", addr), stderr=subprocess.PIPE, text=True,
                         stdout=subprocess.DEVNULL)
    try:
        said = []
        for line in p.stderr:
            said.append(line)
            if "serving" in line or "cannot serve" in line:
                break
        if "cannot serve" in said[-1] and addr == "::" and not os.path.exists("/proc/net/if_inet6"):
            pytest.skip("no IPv6 here")
        port = said[-1].split("]:" if addr == "::" else f"{addr}:")[1].split("/")[0]
        warning = (f"tuimon: warning: metrics are served on every interface ({addr}): whoever reaches port {port} "
                   "of this machine reads them, unauthenticated (--addr 127.0.0.1: this machine only)\n")
        assert (warning in said) == warned, said
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=30)
