"""Faults while attached: each source failing mid-run, with real processes and real segments (a
fake NVML only at the pynvml boundary). Each time the monitor keeps sampling, says what
happened on screen, and keeps what it had read."""

import gzip
import os
import re
import signal
import subprocess
import sys
import time

import pynvml
import pytest

from tests.conftest import ROOT, tuimon_cmd, wait_for
from tests.fake_nvml import FakeNvml
from tuimon.channel import SegmentWriter
from tuimon.channel import layout as L
from tuimon.channel.meta import JobMeta
from tuimon.model import CaptureStatus
from tuimon.monitor.session import LiveSession
from tuimon.monitor.summaries import SummaryWorker
from tuimon.sources.nvml import DeviceSampler
from tuimon.sources.poller import Poller
from tuimon.ui.app import make_app
from tuimon.ui.widgets import Panel

PLANTED = str(ROOT / "tests" / "workloads" / "planted_wait.py")


def shown(app, wid) -> str:
    panel = app.screen.query_one(wid, Panel)
    return panel._last.plain if panel._last is not None and panel.display else ""


async def until(pilot, app, pred, what, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        await pilot.pause(0.05)
        if pred():
            return
    raise AssertionError(f"timed out waiting for {what}; status line: {shown(app, '#status')!r}")


@pytest.mark.asyncio
async def test_nvml_failing_mid_run_then_recovering(sleeper):
    fake = FakeNvml()
    app = make_app(LiveSession(sleeper.pid, 0.1, devices=DeviceSampler(fake)), "test")
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, app, lambda: "612/700 W" in shown(app, "#gpus"), "a first GPU sample")
        fake.fail["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_UNKNOWN  # one call fails mid-run
        await until(pilot, app, lambda: "NVML failed: power_w: Unknown Error" in shown(app, "#gpus"),
                    "the failed call named in the GPU panel")
        assert "n/a W" in shown(app, "#gpus") and "SM active" in shown(app, "#gpus")  # the rest goes on
        del fake.fail["nvmlDeviceGetPowerUsage"]
        await until(pilot, app, lambda: "NVML failed" not in shown(app, "#gpus") and "612/700 W" in shown(app, "#gpus"),
                    "the message to clear on recovery")
        # A sampler that raises outright (a bug, or a library in a bad state): said in the status line.
        real = app.session.gpus.sample
        app.session.gpus.sample = lambda: 1 / 0
        await until(pilot, app, lambda: "⚠ NVML: ZeroDivisionError" in shown(app, "#status"), "the sampler's failure")
        cycles = app.state.cycles
        await until(pilot, app, lambda: app.state.cycles > cycles + 3, "sampling to go on")
        assert "612/700 W" in shown(app, "#gpus")  # the last numbers stay on screen
        app.session.gpus.sample = real
        await until(pilot, app, lambda: shown(app, "#status") == "", "the status line to clear")


def _segment_with_steps(n=12):
    """A real segment with n steps of 10 ms, 3 of them waiting 4 ms for data."""
    w = SegmentWriter.create(JobMeta(argv=("train.py",)), 256)
    for k in range(1, n + 1):
        t = k * 10_000_000
        w.emit(L.DATA_WAIT, 0, 0, 1, k, t, t + 4_000_000, 0.0)
        w.emit(L.STEP, 0, 0, 1, k, t, t + 10_000_000, 0.0)
    w.set_steps(n, time.monotonic_ns())
    return w


def numbers(text):
    return re.findall(r"[\d.]+", text)


@pytest.mark.asyncio
@pytest.mark.parametrize("fault", ["overwritten", "truncated"])
async def test_a_segment_damaged_while_attached(shm_dir, fault):
    """The channel breaks under the monitor: it says so, keeps the numbers it had read, keeps
    sampling the process, and picks the channel up again once it is readable."""
    w = _segment_with_steps()
    session = LiveSession(os.getpid(), 0.1, devices=DeviceSampler(FakeNvml()))
    app = make_app(session, "test")
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, app, lambda: "step 12" in shown(app, "#header"), "the job's steps")
        before = shown(app, "#steps")
        original = open(w.path, "rb").read()
        if fault == "overwritten":
            w._mm[0:64] = b"\xff" * 64
            expected = "is not a tuimon channel segment (bad magic"  # as the reopen finds it
        else:
            os.truncate(w.path, 100)  # (the writer here writes no more: its mapping would fault)
            expected = "is truncated (100 bytes, header needs 4096)"
        await until(pilot, app, lambda: expected in shown(app, "#status") and app.session.finder.training is None,
                    "the channel's failure, after a reopen was tried")
        # nothing read is lost (the numbers; the sparkline's columns follow the clock)
        assert numbers(shown(app, "#steps")) == numbers(before) and "step 12" in shown(app, "#header")
        cycles = app.state.cycles
        await until(pilot, app, lambda: app.state.cycles > cycles + 3, "sampling to go on")
        assert "training python" in shown(app, "#process")  # the loop thread it had is still known
        with open(w.path, "r+b") as f:  # repaired: the monitor reads it again
            f.write(original)
        await until(pilot, app, lambda: shown(app, "#status") == "" and app.session.finder.training is not None,
                    "the channel to be read again")
        assert "step 12" in shown(app, "#header")
    w.unlink()


@pytest.mark.asyncio
async def test_the_job_killed_inside_a_capture_window(shm_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TUIMON_CAPTURE_DIR", str(tmp_path / "caps"))
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, PLANTED, 3000, 0.02, 0.004),
                           stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "training"
        app = make_app(LiveSession(job.pid, 0.1, devices=DeviceSampler(FakeNvml())), "test")
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, app, lambda: "c: capture 10 steps" in shown(app, "#capture"), "the capture line")
            app.capture_steps = 500  # long enough to die inside it
            await pilot.press("c")
            await until(pilot, app, lambda: "capturing" in shown(app, "#capture"), "the window to open")
            job.send_signal(signal.SIGKILL)
            job.wait()
            await until(pilot, app, lambda: "failed: the process exited while the capture was capturing"
                        in shown(app, "#capture"), "the window to be marked failed")
            # (one poll reads the capture's state after the process sample: the header may say it a poll later)
            await until(pilot, app, lambda: "PROCESS EXITED" in shown(app, "#header"), "the header to say it")
            assert "step " in shown(app, "#header")
            cycles = app.state.cycles
            await until(pilot, app, lambda: app.state.cycles > cycles + 3, "sampling to go on")
    finally:
        job.kill()
        job.wait()


def synthetic_trace(path, mb: float):
    """A gzip Chrome trace of about `mb` MB of JSON: nested CPU ops and kernels, as torch writes."""
    events = []
    for k in range(200):
        ts = k * 100
        events += [f'{{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": {ts}, "dur": 50}}',
                   f'{{"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": {ts + 5}, "dur": 40}}',
                   f'{{"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": {ts + 10}, '
                   f'"dur": 30, "args": {{"stream": 7}}}}']
    chunk = ",\n".join(events)
    reps = max(1, int(mb * 1e6 / len(chunk)))
    with gzip.open(path, "wt", compresslevel=1) as f:
        f.write('{"schemaVersion": 1, "traceEvents": [\n')
        for r in range(reps):
            f.write(chunk + (",\n" if r + 1 < reps else "\n"))
        f.write('], "traceName": "synthetic"}\n')
    return reps * 200


def test_a_200_mb_trace_is_summarised_off_the_sampler_thread(tmp_path, sleeper):
    path = str(tmp_path / "big.pt.trace.json.gz")
    reps = synthetic_trace(path, 200)
    session = LiveSession(sleeper.pid, 0.25, devices=DeviceSampler(FakeNvml()))
    stamps = []
    poller = Poller(session.poll, lambda c: stamps.append(time.monotonic()), 0.25).start()
    try:
        status = CaptureStatus(seq=1, state="done", kind="torch.profiler", first_step=1, last_step=10,
                               message="", path=path)
        t0 = time.monotonic()
        assert session.captures.summaries.summary(status).state == "pending"  # never blocks
        summary = wait_for(lambda: (s := session.captures.summaries.summary(status)).state != "pending" and s, timeout=240,
                           what="the summary")
        took = time.monotonic() - t0
    finally:
        poller.stop()
        session.stop()
    assert summary.state == "done", summary.error
    assert summary.lines[0].startswith(f"{reps:,} kernels, {reps // 10:,} per step, 30.0 us each")
    # self time: aten::linear (50 us) minus the aten::addmm (40 us) inside it
    assert any(line.split()[-1] == "aten::addmm" and "40x" not in line for line in summary.lines)
    during = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    assert took > 2 and len(stamps) >= took / 0.25 * 0.6, (took, len(stamps))
    assert max(during) < 0.25 + 0.75, max(during)  # the 1 s rhythm (here 0.25 s) held throughout


def test_a_summary_that_times_out_is_a_failed_summary(tmp_path):
    path = str(tmp_path / "t.pt.trace.json.gz")
    synthetic_trace(path, 60)
    worker = SummaryWorker(timeout=0.3)
    status = CaptureStatus(seq=2, state="done", kind="torch.profiler", first_step=1, last_step=1, message="",
                           path=path)
    s = wait_for(lambda: (x := worker.summary(status)).state != "pending" and x, what="the timeout")
    worker.stop()
    assert s.state == "failed" and s.error == "summary timed out after 0.3 s" and s.file == path


@pytest.mark.asyncio
async def test_a_summary_failure_and_a_missing_nsys_are_shown(tmp_path, monkeypatch):
    """The capture panel shows a failed summary with its reason (here: a corrupt trace file)."""
    from tuimon.model import Cycle, TrainingSnapshot
    from tuimon.monitor.state import MonitorState

    bad = tmp_path / "bad.pt.trace.json.gz"
    bad.write_bytes(b"not gzip at all")
    worker = SummaryWorker()
    status = CaptureStatus(seq=3, state="done", kind="torch.profiler", first_step=1, last_step=5, message="",
                           path=str(bad))
    s = wait_for(lambda: (x := worker.summary(status)).state != "pending" and x, what="the summary")
    worker.stop()
    assert s.state == "failed" and "cannot read the trace" in s.error
    state = MonitorState()
    from dataclasses import replace

    state.apply(Cycle(t=1, training=TrainingSnapshot(pid=1, steps=9), capture=replace(status, summary=s)))
    app = make_app(None, "test", state)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.redraw()
        await pilot.pause()
        assert "last capture 3: steps 1..5" in shown(app, "#capture") and "cannot read the trace" in shown(app, "#capture")


@pytest.mark.asyncio
async def test_attach_to_a_plain_process_then_it_instruments_itself(shm_dir):
    """No channel at first: the process and GPU panels, and a banner saying what the loop's own
    timings need; once the job calls tuimon.instrument(), the monitor picks the channel up."""
    code = ("import sys, time; print('up', flush=True); sys.stdin.readline()\n"
            "import tuimon; tuimon.instrument()\n"
            "for _ in range(3000): tuimon.step(); time.sleep(0.01)\n")
    job = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "up"
        app = make_app(LiveSession(job.pid, 0.1, devices=DeviceSampler(FakeNvml())), "test")
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, app, lambda: "no channel:" in shown(app, "#steps"), "the no-channel banner")
            assert "has no tuimon channel" in shown(app, "#steps") and "tuimon run" in shown(app, "#steps")
            assert "GPU 0 NVIDIA H200" in shown(app, "#gpus") and "target python" in shown(app, "#process")
            job.stdin.write("go\n")
            job.stdin.flush()
            await until(pilot, app, lambda: "p50" in shown(app, "#steps"), "the channel to be picked up", timeout=40)
            assert "no channel" not in shown(app, "#steps")
    finally:
        job.kill()
        job.wait()
