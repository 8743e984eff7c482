"""nsys windows through an interactive session (tuimon/capture/nsys_session.py). No nsys on CI:
a stand-in at the subprocess boundary (tests/helpers/fake_nsys.py, put on PATH as `nsys`) with
a real torch loop and its real probe; the same code path runs with the real nsys in
tests/gpu/check_nsys_sessions.sh."""

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import HELPERS, ROOT, tuimon_cmd, wait_for
from tuimon.capture.client import CaptureRefused
from tuimon.capture.nsys_session import NsysArgsError, launch_command, session_name, split_args

LOOP = str(ROOT / "tests" / "workloads" / "regressing.py")


def test_nsys_args_are_split_between_launch_and_start():
    launch, start = split_args(["--trace", "cuda,nvtx", "--sample=none", "--gpu-metrics-devices", "0",
                                "--cudabacktrace=all", "-s", "cpu", "--pytorch=autograd-nvtx"])
    assert launch == ["--trace=cuda,nvtx", "--cudabacktrace=all", "--pytorch=autograd-nvtx"]
    assert start == ["--sample=none", "--gpu-metrics-devices=0", "-s", "cpu"]
    for bad, words in ((["-o", "x"], "tuimon sets -o itself"), (["--capture-range=nvtx"], "sets --capture-range"),
                       (["--frobnicate"], "neither an `nsys launch` nor an `nsys start` option"),
                       (["train.py"], "is not an option")):
        with pytest.raises(NsysArgsError, match=words):
            split_args(bad)
    assert split_args([]) == ([], [])


def test_the_launch_command_and_unique_session_names():
    assert launch_command("/opt/nsys", "s1", ["python", "t.py"]) == [
        "/opt/nsys", "launch", "--session-new=s1", "--trace=cuda,nvtx,osrt", "python", "t.py"]
    assert launch_command("/opt/nsys", "s1", ["python", "t.py"], ["--trace=cuda"]) == [
        "/opt/nsys", "launch", "--session-new=s1", "--trace=cuda", "python", "t.py"]
    names = {session_name() for _ in range(50)}
    assert len(names) == 50 and all(n.startswith(f"tuimon-{os.getuid()}-{os.getpid()}-") for n in names)


@pytest.fixture
def fake_nsys(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nsys").symlink_to(HELPERS / "fake_nsys.py")
    state = tmp_path / "nsys-state"
    state.mkdir()
    log = tmp_path / "nsys.log"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NSYS_DIR", str(state))
    monkeypatch.setenv("FAKE_NSYS_LOG", str(log))
    monkeypatch.setenv("TUIMON_CAPTURE_DIR", str(tmp_path / "captures"))

    def calls():
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return state, calls


def headless_job(*extra, seconds=60):
    p = subprocess.Popen(tuimon_cmd("run", "--headless", "--nsys", *extra, "--", sys.executable, LOOP,
                                    "--seconds", seconds), stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert p.stdout.readline().strip() == "training"
    return p


def kill(job):
    """The job and what nsys started (killing nsys alone would leave the loop running its minute)."""
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()


def test_three_windows_on_a_running_job_each_with_its_report(fake_nsys, tmp_path):
    state, calls = fake_nsys
    job = headless_job("--nsys-args", "--sample=none --trace cuda,nvtx")
    try:
        session = calls()[0]["args"][1].split("=", 1)[1]
        assert calls()[0]["args"][:4] == ["launch", f"--session-new={session}", "--trace=cuda,nvtx", sys.executable]
        reports = []
        for _ in range(3):
            p = subprocess.run(tuimon_cmd("capture", job.pid, "--steps", 5, "--wait", "--timeout", 60),
                               capture_output=True, text=True, timeout=90)
            assert p.returncode == 0, p.stderr
            assert "for an nsys capture of 5 steps" in p.stdout and "capturing:" in p.stdout
            assert "first window of an nsys session slows one step by ~35 ms" in p.stdout
            report = next(line for line in p.stdout.splitlines() if line.endswith(".nsys-rep"))
            assert os.path.getsize(report) > 0 and "top kernels:" in p.stdout and "ampere_bf16_gemm" in p.stdout
            assert "top CUDA API calls:" in p.stdout and "cudaLaunchKernel" in p.stdout
            reports.append(report)
        assert len(set(reports)) == 3 and job.poll() is None  # the job goes on
        starts = [c for c in calls() if c["args"][0] == "start"]
        stops = [c for c in calls() if c["args"][0] == "stop"]
        assert len(starts) == len(stops) == 3
        assert all(f"--session={session}" in c["args"] and "--sample=none" in c["args"] for c in starts)
        assert all(stop["t"] - start["t"] >= 5 * 0.02 for start, stop in zip(starts, stops, strict=True))  # >= 5 steps
    finally:
        kill(job)


def test_refusals_and_a_failing_nsys(fake_nsys, monkeypatch, shm_dir):
    from tuimon.capture import nsys_session
    from tuimon.monitor.target import open_channel

    state, _ = fake_nsys
    job = headless_job()
    try:
        reader, _ = open_channel(job.pid)
        monkeypatch.setenv("FAKE_NSYS_STOP_S", "3")
        windows = nsys_session.for_job(reader.info, lambda: reader.steps)
        seq = windows.request(steps=3)
        wait_for(lambda: windows.status().state == "writing", timeout=30, what="the report being written")
        with pytest.raises(CaptureRefused, match="is being written .nsys stop writes the report.: one at a time"):
            windows.request(steps=3)
        other = nsys_session.for_job(reader.info, lambda: reader.steps)  # a second monitor of the same job
        with pytest.raises(CaptureRefused, match="another tuimon is taking an nsys window of this job: one at a time"):
            other.request(steps=3)
        assert windows.wait(seq, 30).state == "done"
        assert other.wait(other.request(steps=3), 30).state == "done"  # once the first is written
        monkeypatch.setenv("FAKE_NSYS_FAIL", "stop")  # nsys dies mid-window
        st = windows.wait(windows.request(steps=3), 30)
        assert st.state == "failed" and "nsys stop failed (1): Error: the profiler agent is not responding" in st.message
        assert "the job goes on" in st.message and job.poll() is None
        monkeypatch.delenv("FAKE_NSYS_FAIL")
        for f in state.iterdir():  # (the failed stop left the stand-in's session collecting)
            f.write_text(json.dumps({"state": "launched"}))
        seq = windows.request(steps=200)  # nsys killed mid-window: its session is gone
        wait_for(lambda: windows.status().state == "capturing", timeout=30, what="the window collecting")
        for f in state.iterdir():
            f.unlink()
        st = windows.wait(seq, 60)
        assert st.state == "failed" and "session" in st.message and "not found" in st.message, st.message
        assert "the nsys session is gone (nsys killed or ended): no more windows" in st.message
        # A request through the control block (an older tuimon) is refused by the probe, in words
        p = subprocess.run([sys.executable, "-c", f"""
from tuimon.capture.client import CaptureClient
from tuimon.channel import SegmentReader
r = SegmentReader({reader.path!r})
c = CaptureClient(r.info.path, r.info.pid, r.info.start_ticks)
print(c.wait(c.request(steps=2), 10).message)"""], capture_output=True, text=True, timeout=30)
        assert "refused: this job's nsys session takes its windows from the monitor" in p.stdout, p.stderr
        reader.close()
    finally:
        kill(job)


def test_the_session_ends_with_tuimon_run(fake_nsys):
    state, calls = fake_nsys
    p = subprocess.run(tuimon_cmd("run", "--plain", "--nsys", "--nsys-args=--sample=none", "--", sys.executable, LOOP,
                                  "--seconds", 2),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    session = calls()[0]["args"][1].split("=", 1)[1]
    assert "--sample=none" not in calls()[0]["args"]  # (a start option: it goes to each window's nsys start)
    assert calls()[-1]["args"] == ["shutdown", f"--session={session}"]
    assert os.listdir(state) == []  # no session left
    p = subprocess.run(tuimon_cmd("run", "--plain", "--nsys", "--nsys-args", "-o mine", "--", "true"),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "tuimon sets -o itself" in p.stderr


def test_the_screen_takes_windows_through_the_session(fake_nsys, shm_dir):
    """LiveSession (what the TUI polls): `c` goes to nsys, the capture panel follows it."""
    from tuimon.monitor.session import LiveSession
    from tuimon.monitor.state import MonitorState
    from tuimon.ui.panels.capture import capture_panel

    job = headless_job()
    session = LiveSession(job.pid, 0.5)
    try:
        first = wait_for(lambda: (c := session.poll()).training is not None and c.training.steps > 3 and c,
                         timeout=30, what="steps")
        state = MonitorState()
        state.apply(first)
        panel = capture_panel(state.view(), 10).plain  # what a window costs, said before the first
        assert "c: capture 10 steps with nsys" in panel and "first window of an nsys session slows one step" in panel
        said = session.request_capture(5, None)
        assert said == "capture 1 asked: 5 steps"
        st = wait_for(lambda: (c := session.poll()).capture.state == "done" and c.capture, timeout=30,
                      what="the window")
        assert st.kind == "nsys" and st.path.endswith(".nsys-rep") and st.last_step - st.first_step + 1 >= 5
        summary = wait_for(lambda: (c := session.poll()).capture.summary.state == "done" and c.capture.summary,
                           timeout=30, what="the summary")
        assert any("ampere_bf16_gemm" in line for line in summary.lines)
    finally:
        session.stop()
        kill(job)
