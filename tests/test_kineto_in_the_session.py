"""The TUI's `c` on a job in Kineto's daemon mode (issue 41): the live session's captures choose the
client as `tuimon capture` does (capture/backends.py), Kineto's endpoint asked on a thread of its
own (never the sampler's, never the UI's), the probe's window when the job does not ask it; the
Nsight Compute commands of a window's top kernels (capture/ncu.py) on the `l` screen.

The boundary faked: Kineto inside the job. A client written from Kineto's structs
(tests/test_kineto_daemon.py's) asks the endpoint as this test process (the job: a segment of this
process), and, handed a config, writes tests/fixtures/kineto_gpu_trace.json where the config says
(what torch 2.x writes for a GPU run: there is no GPU here)."""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
import uuid

import pytest

from tests.conftest import ROOT
from tests.test_kineto_daemon import Client
from tuimon.capture import backends, kineto_windows
from tuimon.capture import kineto_daemon as K
from tuimon.capture.client import CaptureClient, CaptureRefused
from tuimon.channel import SegmentReader, SegmentWriter
from tuimon.channel import layout as L
from tuimon.channel.control import open_control
from tuimon.channel.meta import JobMeta
from tuimon.monitor.captures import Captures
from tuimon.monitor.summaries import SummaryWorker
from tuimon.monitor.training import TrainingView
from tuimon.sources.channel import ChannelSource

TRACE = str(ROOT / "tests" / "fixtures" / "kineto_gpu_trace.json")
ARGV = ("train.py", "--lr", "3e-4", "--name", "it's mine")


class FakeKineto:
    """Kineto's config thread in the job: asks the endpoint every 0.1 s (Kineto: 5 s) as this
    process; a config handed over is answered with the fixture trace, written where it says."""

    def __init__(self, endpoint: str, ask: bool = True):
        self.client = Client(endpoint)
        self.client.sock.settimeout(0.2)
        self.ask, self.configs = ask, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.ask:
                try:
                    got = self.client.req([os.getpid(), os.getppid()])
                except OSError:  # (no endpoint yet: Kineto's "IPC sync_send fail")
                    got = None
                if got is not None and got[1]:
                    config = got[1].decode()
                    self.configs.append(config)
                    path = re.search(r"^ACTIVITIES_LOG_FILE=(.*)$", config, re.M).group(1)
                    out = K.trace_file(path, os.getpid())
                    shutil.copy(TRACE, out + ".tmp")
                    os.rename(out + ".tmp", out)  # (as Kineto: written, then renamed)
            time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.client.close()


@pytest.fixture
def daemon_job(tmp_path, monkeypatch):
    """This process as a job in Kineto's daemon mode whose steps the optimizer counts: its segment
    (80 steps of 10 ms), a view of it, and an endpoint name of its own (not the host's "dynolog")."""
    monkeypatch.setenv("TUIMON_CAPTURE_DIR", str(tmp_path / "captures"))
    monkeypatch.setenv("TUIMON_KINETO", "1")
    monkeypatch.setattr(kineto_windows, "job_uses_daemon", lambda pid: pid == os.getpid())
    name = f"tuimon-test-{uuid.uuid4().hex[:12]}"
    monkeypatch.setattr(kineto_windows, "KinetoEndpoint", lambda: K.KinetoEndpoint(name))
    w = SegmentWriter.create(JobMeta(argv=ARGV), 256)
    source = w.intern("step.source")
    t = 1_000_000_000
    w.emit(L.GAUGE, 0, source, 1, 1, t, t, float(L.STEP_SOURCES.index("optimizer")))
    for k in range(1, 81):
        w.emit(L.STEP, 0, 0, 1, k, t, t + 10_000_000, 0.0)
        t += 10_000_000
    w.set_steps(80, time.monotonic_ns())
    view = TrainingView(ChannelSource(SegmentReader(w.path)))
    view.poll()
    yield w, view, name
    view.source.reader.close()
    w.unlink()


def _until(check, timeout: float):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.02)
    return check()


def returns(call, within: float = 30.0):
    """What call() returns, called on a thread: it must return within `within` s."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(call()), daemon=True)
    t.start()
    t.join(within)
    assert out, f"{call} did not return while the job's Kineto was not asking"
    return out[0]


def test_c_on_a_job_in_kinetos_daemon_mode_takes_a_kineto_window_off_the_sampler_thread(daemon_job):
    w, view, name = daemon_job
    kineto = FakeKineto(name)
    captures = Captures(SummaryWorker())
    try:
        problems: dict = {}
        first = captures.status(view, problems, "optimizer")
        assert isinstance(captures.client, CaptureClient)  # (before `c`: the probe's client; the line says kineto)
        assert (first.state, first.kind) == ("idle", "kineto") and "c asks its endpoint first" in first.message
        # The endpoint is asked on a thread: request and status return while the job's Kineto does not ask for
        # its config (a call that waited for it would not return until it asks again)
        kineto.ask = False
        time.sleep(0.5)  # (an ask in flight ends: its socket times out in 0.2 s)
        said = returns(lambda: captures.request(5, None, False, "-"))
        asking = returns(lambda: captures.status(view, problems, "optimizer"))
        kineto.ask = True
        assert "asking Kineto's endpoint" in said and asking.state == "armed" and asking.kind == "kineto", asking
        done = _until(lambda: (s := captures.status(view, {}, "optimizer")).state in ("done", "failed") and
                      s.summary is not None and s.summary.state != "pending" and s, 30)
        assert done and done.state == "done" and done.kind == "kineto", done
        assert isinstance(captures.client, kineto_windows.KinetoWindows)
        assert done.path.endswith(f"_{os.getpid()}.json") and done.path.startswith(os.environ["TUIMON_CAPTURE_DIR"])
        assert "ACTIVITIES_ITERATIONS=5" in kineto.configs[0]
        assert any("ampere_sgemm_128x64_tn" in line for line in done.summary.lines), done.summary
        cmds = done.summary.ncu_commands
        assert cmds[0] == ("ncu --kernel-name 'regex:^ampere_sgemm_128x64_tn$' --launch-skip 10 --launch-count 1 "
                           f"-o tuimon-{os.getpid()}-1 -- train.py --lr 3e-4 --name 'it'\"'\"'s mine'"), cmds
        ctl, fv = open_control(w.path)
        try:
            assert ctl.read_request().seq == 0  # (nothing asked of the probe)
        finally:
            fv.close()
    finally:
        captures.stop()
        kineto.stop()


def test_a_daemon_job_that_never_asks_the_endpoint_gets_no_torch_profiler_window(daemon_job, monkeypatch):
    """A job in daemon mode whose Kineto does not ask this endpoint: refused in words, the probe never
    asked (a torch.profiler window in a daemon-mode job ended one with SIGSEGV on an H200)."""
    w, view, name = daemon_job
    monkeypatch.setattr(kineto_windows, "REGISTER_WAIT_S", 0.5)
    kineto = FakeKineto(name, ask=False)
    captures = Captures(SummaryWorker())
    try:
        captures.status(view, {}, "optimizer")
        captures.request(5, None, False, "-")
        problems: dict = {}
        assert _until(lambda: "SIGSEGV" in captures.status(view, problems, "optimizer").message
                      or "SIGSEGV" in problems.get("capture", ""), 10), (captures.status(view, {}, "optimizer"), problems)
        said = captures.status(view, problems, "optimizer").message + " " + problems.get("capture", "")
        assert "did not ask Kineto's endpoint within 0.5 s" in said, said
        ctl, fv = open_control(w.path)
        try:
            assert ctl.read_request().seq == 0  # (the probe was never asked for a window)
        finally:
            fv.close()
    finally:
        captures.stop()
        kineto.stop()


def test_what_choose_takes_for_each_kind_of_window(daemon_job, monkeypatch):
    """The one place: a memory window is the probe's in any job; a time window and a job counted by
    something other than its optimizer are refused in a daemon-mode job (no torch.profiler window
    there: backends.PROFILER_IN_DAEMON_MODE), without waiting for the endpoint."""
    w, view, name = daemon_job
    info = view.source.reader.info
    said: list[str] = []
    c = backends.choose(info, lambda: 80, backends.Ask(5, None, True), "optimizer", say=said.append)
    assert isinstance(c, CaptureClient) and not said
    c.close()
    for ask, source, why in ((backends.Ask(None, 10.0), "optimizer", "time windows"),
                             (backends.Ask(5, None), "forward", "counted by forward")):
        assert not backends.may_wait(info, ask, source, None)
        with pytest.raises(CaptureRefused, match="SIGSEGV") as refused:
            backends.choose(info, lambda: 80, ask, source, say=said.append)
        assert why in str(refused.value), refused.value
    assert backends.choose(info, lambda: 80, None, "optimizer") is not None  # (following, no window asked)
    assert backends.may_wait(info, backends.Ask(5, None), "optimizer", None)
    monkeypatch.setenv("TUIMON_KINETO", "0")
    assert not backends.may_wait(info, backends.Ask(5, None), "optimizer", None)
    with pytest.raises(CaptureRefused, match="TUIMON_KINETO=0: no torch.profiler window"):
        backends.choose(info, lambda: 80, backends.Ask(5, None), "optimizer")


@pytest.mark.asyncio
async def test_c_in_the_tui_takes_a_kineto_window_and_l_shows_its_ncu_commands(daemon_job):
    from rich.text import Text

    from tests.fake_nvml import FakeNvml
    from tuimon.monitor.session import LiveSession
    from tuimon.sources.nvml import DeviceSampler
    from tuimon.ui.app import make_app
    from tuimon.ui.screens import CapturesScreen
    from tuimon.ui.widgets import Panel

    w, view, name = daemon_job
    kineto = FakeKineto(name)
    fake = FakeNvml()
    fake.fail["nvmlInit"] = 12
    app = make_app(LiveSession(os.getpid(), 0.2, devices=DeviceSampler(fake)), "test")

    def panel(wid: str) -> str:
        return (app.screen.query_one(wid, Panel)._last or Text("")).plain

    try:
        async with app.run_test(size=(120, 40)) as pilot:
            end = time.monotonic() + 20
            while time.monotonic() < end and "c: capture" not in panel("#capture"):
                await pilot.pause(0.05)
            assert "c: capture 10 steps with kineto" in panel("#capture"), panel("#capture")  # (what c takes, said)
            app._set_steps(5)
            await pilot.press("c")
            end = time.monotonic() + 40
            while time.monotonic() < end and not ("last capture 1:" in panel("#capture") and
                                                  "ampere_sgemm" in panel("#capture")):
                await pilot.pause(0.05)
            shown = panel("#capture")
            assert "last capture 1:" in shown and "kineto" in shown and "ampere_sgemm_128x64_tn" in shown, shown
            await pilot.press("l")
            await pilot.pause(0.1)
            app.redraw()
            await pilot.pause(0.1)
            assert isinstance(app.screen, CapturesScreen)
            summary = panel("#capture-summary")
            assert "ncu --kernel-name 'regex:^ampere_sgemm_128x64_tn$' --launch-skip 10" in summary, summary
            assert "-- train.py --lr 3e-4" in summary
    finally:
        kineto.stop()
