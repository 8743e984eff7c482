"""The edges a new user meets in the UI (issue 13): top, keys, help per mode, the process panel's
roles, a replay's position and bad lines, a job that ended, NO_COLOR, narrow terminals."""

import getpass
import os
import re
import threading

import pytest
from rich.text import Text

from tests.conftest import ROOT
from tests.fake_nvml import FakeNvml
from tuimon.model import Cycle, ProcessSample, ProcRow
from tuimon.monitor.session import LiveSession, ReplaySession
from tuimon.monitor.state import MonitorState
from tuimon.sources.nvml import DeviceSampler
from tuimon.ui.app import make_app
from tuimon.ui.panels.breakdown import breakdown_panel
from tuimon.ui.panels.ended import ended_panel
from tuimon.ui.panels.gpus import gpus_panel
from tuimon.ui.panels.header import header
from tuimon.ui.panels.process import process_panel
from tuimon.ui.replay_frames import state_from_recording
from tuimon.ui.screens import HelpScreen, TopScreen
from tuimon.ui.screens.gpu import gpu_history_plot
from tuimon.ui.widgets import Panel

V2 = str(ROOT / "tests" / "fixtures" / "h100_demo_v2.jsonl")


def text(app, wid):
    return (app.screen.query_one(wid, Panel)._last or Text("")).plain


async def until(pilot, cond, turns=100):
    for _ in range(turns):
        await pilot.pause(0.05)
        if cond():
            return True
    return False


@pytest.mark.asyncio
async def test_top_shows_every_gpu_with_its_processes_and_the_host_and_no_training_panels():
    fake = FakeNvml(gpus=2)
    fake.processes[0].pid = os.getpid()  # a process /proc can name: this test's own
    session = LiveSession(None, 0.1, devices=DeviceSampler(fake))
    app = make_app(session, "top", top=True)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: "GPU 1" in text(app, "#gpus"))
        assert isinstance(app.screen, TopScreen)
        shown = text(app, "#gpus")
        assert "GPU 0 NVIDIA H200" in shown and "GPU 1 NVIDIA H200" in shown
        assert re.search(r"PID\s+USER\s+GPU MEM\s+SM\s+COMMAND", shown)
        row = next(line for line in shown.splitlines() if line.strip().startswith(str(os.getpid())))
        assert getpass.getuser()[:10] in row and "3.0 GiB" in row and "pytest" in row
        assert re.search(r"CPU \d+% of \d+ cores · memory [\d.]+ \w+ of", text(app, "#header"))
        for training in ("#verdict", "#steps", "#capture", "#breakdown"):
            assert not app.screen.query(training)
        assert app.check_action("capture", ()) is False and app.check_action("gpu", ()) is True
        await pilot.press("c")  # nothing to capture in top: no toast, no crash
        assert not app._notifications
        await pilot.press("question_mark")
        await pilot.pause()
        help_text = str(app.screen.query_one("#help").render())
        assert "tuimon top keys" in help_text and "capture" not in help_text


@pytest.mark.asyncio
async def test_top_without_gpus_says_why_and_still_shows_the_host():
    fake = FakeNvml()
    fake.fail["nvmlInit"] = 12  # NVML_ERROR_LIBRARY_NOT_FOUND
    app = make_app(LiveSession(None, 0.1, devices=DeviceSampler(fake)), "top", top=True)
    async with app.run_test(size=(100, 30)) as pilot:
        assert await until(pilot, lambda: "NVML unavailable" in text(app, "#gpus"))
        assert "NVML Shared Library Not Found" in text(app, "#gpus")
        assert await until(pilot, lambda: "memory" in text(app, "#header"))


@pytest.mark.asyncio
@pytest.mark.parametrize("demo, says", [(True, "quit and stop the demo job"),
                                        (False, "quit (the training process goes on)")])
async def test_help_says_what_q_does_here(demo, says):
    app = make_app(None, "replay", state_from_recording(V2), quit_stops_job=demo)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert says in str(app.screen.query_one("#help").render())


@pytest.mark.asyncio
async def test_ctrl_c_quits_and_there_is_no_palette_key():
    app = make_app(None, "replay", state_from_recording(V2))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        footer = " ".join(b.binding.description for b in app.active_bindings.values() if b.binding.show)
        assert "palette" not in footer
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.return_code == 0  # exited (None while running)


def cycle_with(procs, **kw):
    return Cycle(t=1, process=ProcessSample(pid=100, t=1, procs=procs, cpu_percent=0.0, rss=0, **kw))


def test_the_process_panel_names_each_role_and_does_not_sum_shared_pages():
    rows = [ProcRow(pid=100, role="target", name="bash", cpu_percent=0.0, rss=4 << 20, threads=1,
                    state="sleeping", pss=2 << 20),  # ./job.sh
            ProcRow(pid=101, role="child", name="python", cpu_percent=98.0, rss=900 << 20, threads=12,
                    state="running", pss=700 << 20, loop=True),
            ProcRow(pid=102, role="child", name="pt_data_worker", cpu_percent=40.0, rss=800 << 20, threads=3,
                    state="running", pss=60 << 20),
            ProcRow(pid=103, role="child", name="pt_data_worker", cpu_percent=38.0, rss=800 << 20, threads=3,
                    state="running", pss=60 << 20),
            ProcRow(pid=104, role="child", name="nvidia-smi", cpu_percent=1.0, rss=20 << 20, threads=1,
                    state="sleeping", pss=10 << 20)]
    state = MonitorState()
    state.apply(cycle_with(rows))
    shown = process_panel(state.view()).plain
    assert "training python 101  CPU 98%  PSS 700 MiB" in shown
    assert "launcher bash 100" in shown
    assert "DataLoader workers 2  CPU 78%  PSS 120 MiB" in shown  # not 1.6 GiB of RSS
    assert "other subprocesses 1" in shown
    # where PSS cannot be read (another user's process): RSS, said to overlap
    state.apply(cycle_with([rows[1], rows[2], ProcRow(pid=103, role="child", name="pt_data_worker",
                                                      cpu_percent=1.0, rss=800 << 20)]))
    assert "RSS 1.6 GiB (shared pages counted per process)" in process_panel(state.view()).plain


@pytest.mark.asyncio
async def test_a_replay_says_where_it_is_and_counts_bad_lines(tmp_path):
    lines = open(V2).read().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines[:6] + ["{not json", '{"t": "x"}'] + lines[6:10]) + "\n")
    session = ReplaySession(str(bad), speed=1000)
    app = make_app(session, "replay")
    async with app.run_test(size=(160, 40)) as pilot:
        assert await until(pilot, lambda: "end, 9 cycles" in app.label)
        assert "2 bad lines skipped" in app.label
        assert await until(pilot, lambda: "end, 9 cycles" in text(app, "#header"))


@pytest.mark.asyncio
async def test_at_120_columns_a_replay_keeps_its_tag_and_t_promises_no_probe(tmp_path):
    """Issue 43 item 24: at 120 columns the header left out its [replay · ...] tag (after a bad line
    was skipped the tag grew and went first): what is shown could pass for a live job. And t said
    "tuimon asks for them when the loop stalls (t: now); the probe answers within a second" of a
    recording, with no probe behind it."""
    lines = open(V2).read().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines[:6] + ["{not json"] + lines[6:]) + "\n")
    session = ReplaySession(str(bad), speed=1000)
    app = make_app(session, "replay")
    async with app.run_test(size=(120, 40)) as pilot:
        assert await until(pilot, lambda: "1 bad line skipped" in app.label and "end, " in app.label)
        await pilot.pause(0.1)
        head = text(app, "#header")
        assert "  [replay · " in head and head.rstrip().endswith("]") and len(head) <= 118, head
        assert "ms/step" in head  # (the step time is kept too)
        await pilot.press("t")
        assert await until(pilot, lambda: app.screen.__class__.__name__ == "StacksScreen")
        await pilot.pause(0.1)
        shown = text(app, "#stacks")
        assert "probe answers" not in shown and shown.startswith("no stacks in the recording up to here"), shown
        assert app.screen.check_action("again", ()) is False and not app.live


class CaptureStub:
    """A live session in outline: the H100 recording's cycles, then, once `c` asks, its window armed."""

    ranks_switchable, live = False, True

    def __init__(self):
        from tuimon.sources.recording import Recording

        self.cycles, self.on_cycle, self.asked = list(Recording(V2).cycles()), None, 0

    def start(self, on_cycle, on_end=None):
        self.on_cycle = on_cycle
        threading.Thread(target=lambda: [on_cycle(c) for c in self.cycles], daemon=True).start()

    def stop(self):
        pass

    def request_capture(self, steps, seconds, memory=False):
        from dataclasses import replace

        from tuimon.model import CaptureStatus

        self.asked += 1
        last = self.cycles[-1]
        armed = replace(last, t=last.t + 1, capture=CaptureStatus(seq=1, state="armed", kind="torch.profiler",
                                                                  message="opens at the next step, for 10 steps"))
        threading.Thread(target=self.on_cycle, args=(armed,), daemon=True).start()  # (from the session's thread)
        return "capture 1 asked"

    def next_rank(self):
        raise AssertionError("not asked")

    def request_stacks(self):
        pass

    def progress(self):
        return None


def in_view(app, wid):
    """Whether the widget's first line is inside the scrolling body's window on the screen."""
    body, panel = app.screen.query_one("#body"), app.screen.query_one(wid)
    return body.region.y <= panel.region.y < body.region.bottom


@pytest.mark.asyncio
async def test_at_80x24_c_brings_the_capture_line_into_view():
    """Issue 43 item 19: at 80x24 the capture line is below the fold, so `c` seemed to do nothing."""
    session = CaptureStub()
    app = make_app(session, "test")
    async with app.run_test(size=(80, 24)) as pilot:
        assert await until(pilot, lambda: app.state.cycles == len(session.cycles))  # (the recording played)
        assert await until(pilot, lambda: "c: capture 10 steps" in text(app, "#capture"))
        assert not in_view(app, "#capture")  # (below the fold, as the issue found it)
        await pilot.press("c")
        assert await until(pilot, lambda: "capture 1 armed" in text(app, "#capture"))
        await pilot.pause(0.1)
        assert session.asked == 1 and in_view(app, "#capture"), (app.screen.query_one("#body").region,
                                                                 app.screen.query_one("#capture").region)
        assert "Where the step goes" not in text(app, "#verdict")  # (header and verdict stay where they were)
        assert "PID" in text(app, "#header")


def test_a_recording_without_gpus_says_so_instead_of_waiting():
    state = MonitorState()
    state.apply(Cycle(t=1, process=ProcessSample(pid=100, t=1), gpus=[]))
    assert gpus_panel(state.view(), 100).plain.startswith("no GPU samples")


def test_a_job_that_ended_names_its_log_and_shows_its_last_lines():
    state = MonitorState()
    state.apply(Cycle(t=1, process=ProcessSample(pid=100, t=1, alive=False, exit_code=-9),
                      job_log="/tmp/x/job-1.log",
                      job_tail=["line 1", "Traceback (most recent call last):", "MemoryError"]))
    view = state.view()
    shown = ended_panel(view).plain
    assert shown.startswith("its output: /tmp/x/job-1.log") and shown.rstrip().endswith("MemoryError")
    assert view.verdict.headline == "exited: killed by SIGKILL" and "MemoryError" in view.verdict.evidence


def test_without_colour_each_part_of_the_bar_has_its_own_fill():
    state = state_from_recording(V2)
    bar, *legend = breakdown_panel(state.view(), 80, plain=True).plain.splitlines()
    legend = "\n".join(legend).split("ms per step")[0]  # (it wraps between items)
    fills = set(bar)
    marks = re.findall(r"(\S) (?:data|forward|backward|optimizer|sync|other) \d+%", legend)
    assert len(fills) >= 3 and len(set(marks)) == len(marks) >= 3 and set(marks) >= fills


@pytest.mark.parametrize("width", [80, 100, 120])
def test_the_header_fits_its_width(width):
    view = state_from_recording(V2).view()
    out = header(view, "tuimon run, every 1 s", width=width).plain
    assert len(out) <= width and "step" in out and "ms/step" in out and "/s)" in out  # (the mean step time, steps/s beside)


def test_the_gpu_chart_counts_whole_samples():
    view = state_from_recording(V2).view()
    chart = gpu_history_plot(view.gpus[0], 100, 20, color=False).plain
    axis = next(line for line in chart.splitlines() if re.search(r"\d\s{3,}\d", line) and "│" not in line)
    assert not re.search(r"\d\.\d", axis), axis
    assert len(max(chart.splitlines(), key=len)) >= 99  # the full width asked for, not the terminal's


def test_help_lists_every_key_of_the_main_screen():
    """Each key the app binds is in `?`'s list (or said in another's line: Ctrl-C, +/-, y)."""
    from tuimon.ui.app import TuimonApp

    listed = {line.split()[0] for line in HelpScreen.TRAINING.splitlines()[1:] if line.startswith("  ")}
    said_elsewhere = {"ctrl+c": "Ctrl-C", "plus": "+/-", "minus": "+/-", "y": "y confirms", "M": "(M: ", "l": "(l: "}
    for binding in TuimonApp.BINDINGS:
        key = binding.key.split(",")[0]
        char = {"question_mark": "?"}.get(key, key)
        assert char in listed or said_elsewhere.get(key, "\0") in HelpScreen.TRAINING, key
