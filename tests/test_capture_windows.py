"""monitor/captures.py alone: the shown process's capture client, opened on the first status and
closed when the shown process changes; a request and its refusals; a done window carrying its
summary (the worker's child process faked: the boundary) and its cost from the job's own steps.
A real segment of this process stands for the job; the test writes what its probe would."""

import time

import pytest

from tuimon.capture.client import CaptureRefused
from tuimon.channel import SegmentReader, SegmentWriter
from tuimon.channel import layout as L
from tuimon.channel.control import KIND_MEMORY, KIND_TORCH, open_control
from tuimon.channel.meta import JobMeta
from tuimon.model import CaptureSummary
from tuimon.monitor.captures import Captures
from tuimon.monitor.summaries import SummaryWorker
from tuimon.monitor.training import TrainingView
from tuimon.sources.channel import ChannelSource

STEP_NS = 10_000_000


@pytest.fixture
def job(tmp_path, monkeypatch):
    """This process's segment with 80 steps of 10 ms, step 61 taking 30 ms, and a view of it."""
    monkeypatch.setenv("TUIMON_CAPTURE_DIR", str(tmp_path / "captures"))
    w = SegmentWriter.create(JobMeta(argv=("train.py",)), 256)
    t = 1_000_000_000
    for k in range(1, 81):
        d = 3 * STEP_NS if k == 61 else STEP_NS
        w.emit(L.STEP, 0, 0, 1, k, t, t + d, 0.0)
        t += d
    w.set_steps(80, time.monotonic_ns())
    view = TrainingView(ChannelSource(SegmentReader(w.path)))
    view.poll()
    yield w, view
    view.source.reader.close()
    w.unlink()


def made(status, timeout, cancel):  # the summary worker's child process, faked
    return CaptureSummary(state="done", file=status.path, lines=[f"window {status.seq}: 3 steps"])


def step_end(k):
    """When step k ended, as written above."""
    return 1_000_000_000 + k * STEP_NS + (2 * STEP_NS if k >= 61 else 0)


def test_a_request_goes_into_the_shown_process_control_block(job):
    w, view = job
    captures = Captures(SummaryWorker(make=made))
    try:
        with pytest.raises(CaptureRefused, match="no channel yet"):
            captures.request(5, None, False, why_none="no channel yet")  # (no status yet: no client)
        problems: dict = {}
        assert captures.status(view, problems).state == "idle" and problems == {}
        assert captures.request(5, None, False, "-") == "capture 1 asked: 5 steps"
        ctl, fv = open_control(w.path)
        try:
            req = ctl.read_request()
            assert (req.seq, req.steps, req.kind) == (1, 5, 0)
            with pytest.raises(CaptureRefused, match="capture 1 is already asked for"):
                captures.request(None, 10.0, True, "-")
            ctl.write_state(1, L.STATE_DONE, 60, 62, KIND_TORCH, step_end(62), path="")
            assert captures.request(None, 10.0, True, "-") == "memory capture 2 asked: 10 s"
            assert (ctl.read_request().seq, ctl.read_request().kind) == (2, KIND_MEMORY)
        finally:
            fv.close()
    finally:
        captures.stop()


def test_a_done_window_carries_its_summary_and_its_cost(job):
    w, view = job
    captures = Captures(SummaryWorker(make=made))
    ctl, fv = open_control(w.path)
    try:
        ctl.write_state(1, L.STATE_DONE, 60, 62, KIND_TORCH, step_end(62), path="/tmp/w1.pt.trace.json.gz")
        first = captures.status(view, {})
        assert first.state == "done" and first.summary.state in ("pending", "done")
        for _ in range(200):
            st = captures.status(view, {})
            if st.summary.state == "done":
                break
            time.sleep(0.02)
        assert st.summary.lines == ["window 1: 3 steps"] and st.summary.file == "/tmp/w1.pt.trace.json.gz"
        cost = st.cost  # the 50 steps of 10 ms before it, then 60..62 and one after: 61 took 30 ms
        assert (cost.normal_steps, cost.window_steps, cost.worst_step, cost.worst_ms, cost.ratio) == (50, 3, 61, 30.0, 3.0)
        assert captures.status(view, {}).cost is cost  # (worked out once per window)
    finally:
        fv.close()
        captures.stop()


def test_close_drops_the_client_and_the_next_status_opens_one(job):
    w, view = job
    captures = Captures(SummaryWorker(make=made))
    try:
        captures.status(view, {})
        first = captures.client
        captures.close()
        assert captures.client is None
        with pytest.raises(CaptureRefused, match="the channel broke"):
            captures.request(5, None, False, "the channel broke")
        captures.status(view, {})
        assert captures.client is not None and captures.client is not first
    finally:
        captures.stop()


def test_a_client_that_cannot_be_opened_is_a_problem(job):
    w, view = job
    w.unlink()  # (the segment file gone: its control block cannot be opened)
    problems: dict = {}
    captures = Captures(SummaryWorker(make=made))
    try:
        assert captures.status(view, problems) is None and "capture" in problems and captures.client is None
    finally:
        captures.stop()
