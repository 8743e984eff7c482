"""Edges of the second sweep through the commands (issue 26): the first sample's verdict, baseline
save's refusals, Ctrl-C in capture --wait, a job that changes directory, baselines of another
program in text, addresses. Real commands, real processes."""

import shlex
import shutil
import subprocess
import sys

import pytest

from tests.conftest import tuimon_cmd, wait_for
from tests.test_tmux import Tmux

SLEEPING_LOOP = """
import sys, time, tuimon
tuimon.instrument()
end = time.monotonic() + float(sys.argv[1])
n = 0
while time.monotonic() < end:
    time.sleep(0.05)
    tuimon.step()
    n += 1
    if n == 20:
        print("20 steps", flush=True)
"""


def verdict(line: str) -> str:
    return line.split("verdict: ", 1)[1].split(" | ")[0]


def test_a_sleeping_loop_is_never_called_python_and_keeps_its_verdict_after_it_exits(shm_dir):
    """The first sample has no loop-thread CPU yet (it is a rate): no Python/elsewhere split until
    it is read. When the job exits its process samples stop: the verdict stays what it was."""
    job = subprocess.Popen([sys.executable, "-c", SLEEPING_LOOP, "8"], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline() == "20 steps\n"  # enough for a verdict from the first sample
        p = subprocess.run(tuimon_cmd("attach", job.pid, "--plain", "--interval", "0.5"), capture_output=True,
                           text=True, timeout=90)
    finally:
        job.kill()
        job.wait()
    lines = p.stdout.splitlines()
    assert lines and all("verdict: " in x for x in lines), p.stdout + p.stderr
    assert verdict(lines[0]) == "host-bound: outside the model", lines[0]
    assert not any("Python" in verdict(x) for x in lines), p.stdout
    assert "host-bound: the loop waits elsewhere" in {verdict(x) for x in lines[1:]}, p.stdout
    # (where the diagnosis has an exited verdict of its own, it takes over: still no flip to another class)
    last = verdict(lines[-1])
    assert lines[-1].endswith("[process exited]") and (last == verdict(lines[-2]) or last.startswith("exited")), \
        lines[-2:]


UNTIL_TOLD = """
import os, sys, time, tuimon
tuimon.instrument()
print("up", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.01)
    tuimon.step()
"""


def flat(screen: str) -> str:
    return " ".join(line.strip() for line in screen.splitlines())


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_at_80x24_words_are_cut_with_an_ellipsis_and_nothing_wraps(shm_dir, tmp_path):
    """The next step cut mid-sentence by the panel's edge; the header wrapped once the job exited
    ("... PROCESS EXITED at" / "05:35:25 · last numbers kept"); the ranges screen's "none yet" cut."""
    stop = tmp_path / "stop"
    argv = [sys.executable, "-c", UNTIL_TOLD, stop, *(f"model.layer{i}.hidden_size=4096" for i in range(20))]
    job = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert job.stdout.readline() == "up\n"
    t = Tmux(" ".join(shlex.quote(str(x)) for x in tuimon_cmd("attach", job.pid, "--interval", "0.5")), size=(80, 24))
    try:
        screen = wait_for(lambda: (s := t.screen()) and "confidence; e: why)" in s and s, 60, "a verdict")
        lines = screen.splitlines()
        assert all(len(x) <= 80 for x in lines) and lines[1].startswith("  HOST-BOUND"), screen
        step = next(k for k, x in enumerate(lines) if x.startswith(" → "))
        assert lines[step + 1].rstrip().endswith("…  (low confidence; e: why)"), screen  # cut, and said so
        t.keys("r")
        screen = wait_for(lambda: (s := t.screen()) and "Ranges over the last steps" in s and s, 20, "ranges")
        assert "None yet: the job's own ranges appear here (with tuimon.range(\"name\"), nvtx.annotate or " \
               "torch.cuda.nvtx.range in its code)." in flat(screen), screen
        t.keys("Escape")
        wait_for(lambda: "Where the step goes" in t.screen(), 20, "the main screen")
        stop.touch()
        screen = wait_for(lambda: (s := t.screen()) and "PROCESS EXITED" in s and s, 60, "the job's exit")
        lines = screen.splitlines()
        assert "PROCESS EXITED" in lines[0] and len(lines[0].rstrip()) <= 80, screen
        assert lines[1].startswith("  EXITED"), screen  # the header kept to its line
    finally:
        t.kill()
        job.kill()
        job.wait()


@pytest.mark.asyncio
async def test_without_nvml_the_gpu_screen_names_nvmls_error_and_e_says_not_measured(shm_dir):
    """A real job; NVML faked at its boundary, failing as a machine without the driver's library."""
    from rich.text import Text

    from tests.fake_nvml import FakeNvml
    from tuimon.monitor.session import LiveSession
    from tuimon.sources.nvml import DeviceSampler
    from tuimon.ui.app import make_app
    from tuimon.ui.screens import ExplainScreen, GpuScreen
    from tuimon.ui.widgets import Panel

    fake = FakeNvml()
    fake.fail["nvmlInit"] = 12  # NVML_ERROR_LIBRARY_NOT_FOUND
    job = subprocess.Popen([sys.executable, "-c", SLEEPING_LOOP, "60"], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline() == "20 steps\n"
        app = make_app(LiveSession(job.pid, 0.2, devices=DeviceSampler(fake)), "attached")

        def shown(wid):
            return (app.screen.query_one(wid, Panel)._last or Text("")).plain

        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(200):
                await pilot.pause(0.05)
                if "HOST-BOUND" in shown("#verdict"):
                    break
            await pilot.press("g")
            await pilot.pause(0.3)
            assert isinstance(app.screen, GpuScreen)
            assert shown("#gpu-summary") == "no GPU data: NVML unavailable: NVML Shared Library Not Found"
            await pilot.press("escape", "e")
            await pilot.pause(0.3)
            assert isinstance(app.screen, ExplainScreen)
            explained = shown("#explain")
            assert "GPU memory-bound (DRAM) — GPU activity not measured" in explained, explained
            assert "n/a (no GPU metrics) is under" not in explained
    finally:
        job.kill()
        job.wait()


def test_the_header_and_the_verdict_fit_any_width():
    """Pure render functions on the H100 recording, with a long argv, a job that exited, paused."""
    from dataclasses import replace

    from tests.conftest import ROOT
    from tuimon.analysis.verdicts import Verdict
    from tuimon.ui.panels.header import header
    from tuimon.ui.panels.verdict import VERDICT_LINES, verdict_line, wrapped_lines
    from tuimon.ui.replay_frames import state_from_recording

    view = state_from_recording(str(ROOT / "tests" / "fixtures" / "h100_demo_v2.jsonl")).view()
    t = view.training
    exited = replace(view.process, alive=False, exited_at=1.7e9, exit_code=0)
    long = ["python", "train.py", *(f"model.layer{i}.hidden_size=4096" for i in range(30))]
    for argv in (t.argv, long, ["python", "x.py"], []):
        for process in (view.process, exited):
            for paused in (False, True):
                v = replace(view, training=replace(t, argv=argv), process=process, paused=paused)
                for width in range(20, 201):
                    out = header(v, "attached, every 1 s", width=width).plain
                    assert len(out) <= width and "  ·" not in out, (width, out)
    assert "[attached, every 1 s]" in header(replace(view, training=replace(t, argv=long)), "attached, every 1 s",
                                             width=160).plain
    step = "outside the model, data and syncs the loop thread is mostly not computing: it is blocked on " \
           "something tuimon does not see (I/O, locks, sleeps, collectives): c captures a window to see where"
    v = Verdict(code="host-bound", headline="host-bound: the loop waits elsewhere",
                evidence="GPU activity n/a (no GPU metrics) · other 100% of the step · loop thread at 0% CPU + 3% "
                         "waiting for a core (< 90%)", next_step=step, confidence="low")
    for width in (60, 78, 98, 118):
        out = verdict_line(v, width)
        assert wrapped_lines(out, width) <= VERDICT_LINES, (width, out.plain)
        assert out.plain.endswith("(low confidence; e: why)"), out.plain
    assert "…" in verdict_line(v, 78).plain and "…" not in verdict_line(v, 300).plain
    assert verdict_line(v).plain.endswith(step + "  (low confidence; e: why)")  # no width: whole


def test_clamp_cuts_where_a_search_on_whole_texts_cuts():
    """clamp searches on the plain text; the cut (text and styles) is the one a search that built
    and wrapped each tried Text found, at every width."""
    from rich.text import Text

    from tuimon.ui.panels.verdict import clamp, wrapped_lines

    def by_texts(head: Text, tail: Text, width: int, lines: int) -> Text:
        if wrapped_lines(head + tail, width) <= lines:
            return head + tail

        def cut(n: int) -> Text:
            short = head[:n]
            short.rstrip()
            return short + Text("…") + tail
        lo, hi = 0, len(head.plain)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if wrapped_lines(cut(mid), width) <= lines else (lo, mid - 1)
        space = head.plain.rfind(" ", 0, lo + 1)
        return cut(space if space > lo - 20 and space > 0 else lo)

    head = Text()
    head.append(" INPUT-BOUND (MODERATE) ", "bold reverse")
    head.append("  data wait 9% of the step · forward+backward 87% · loop thread at 97% CPU · "
                "a_very_long_unbroken_word_" * 3 + " and\nits second line", "dim")
    tail = Text("  (low confidence; e: why)", "dim")
    for width in range(8, 140, 3):
        for lines in (1, 2, 3, 4):
            got, want = clamp(head, tail, width, lines), by_texts(head, tail, width, lines)
            assert got.plain == want.plain and got.spans == want.spans, (width, lines)


def test_the_verdicts_line_count_is_rich_text_wraps():
    """line_count (Rich's line breaking redone on public rich.cells: its own is private) counts the
    lines Text.wrap makes with overflow "fold", at every width: words, runs of spaces, words longer
    than the width at a line's start and after others, wide (CJK) characters."""
    import io

    from rich.console import Console
    from rich.text import Text

    from tuimon.ui.panels.verdict import line_count

    console = Console(file=io.StringIO(), width=1000, color_system=None)
    texts = ["", " ", "a", "word", "  two  spaces   between words  ", "a_very_long_unbroken_word_" * 4,
             "short then a_very_long_unbroken_word_a_very_long_unbroken_word_ and after",
             "GPU activity n/a (no GPU metrics) · other 100% of the step · loop thread at 0% CPU",
             "TextualはPythonの高速アプリケーション開発フレームワークです 1670万色 を使用でき", "x " * 40 + "end"]
    for plain in texts:
        for width in range(1, 90):
            want = len(Text(plain).wrap(console, width))
            assert line_count(plain, width) == want, (plain, width)
