"""`tuimon attach` to a Python process started without the probe: its main thread's hot lines,
sampled from outside with py-spy, against the loop's own timers; and the words when py-spy cannot
read it (ptrace denied, not Python, py-spy hung)."""

import json
import os
import shutil
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import ROOT, tuimon_cmd, wait_for
from tuimon.model import OUTSIDE_PHASE, Cycle, ProcessSample
from tuimon.monitor.report import view_json
from tuimon.monitor.session import LiveSession
from tuimon.monitor.state import MonitorState
from tuimon.sources import pyspy
from tuimon.ui.panels.breakdown import breakdown_panel
from tuimon.ui.panels.hot_lines import hot_lines_text

PLANTED = str(ROOT / "tests" / "workloads" / "planted.py")
NOBODY = 65534
# planted.py's hotspot: spin(20) at its hot line (hot_share); its other Python work runs in
# bookkeeping(), so spin()'s lines hold hot_share of the loop's time.
SPIN_LINE = next(i for i, text in enumerate(open(PLANTED), 1) if text.strip() == "while time.perf_counter() < end:"
                 and "def spin" in open(PLANTED).read().splitlines()[i - 3])


def needs_pyspy():
    if pyspy.find_pyspy() is None:
        pytest.skip("py-spy is not installed (pip install -e .)")


def start_hotspot(tmp_path, seconds=90, user=None):
    """planted.py's hotspot loop, plain python (no tuimon), after its warm-up (its truth file written)."""
    truth = tmp_path / "truth.json"
    job = subprocess.Popen([*(as_user() if user else []), sys.executable, PLANTED, "hotspot", "--seconds",
                            str(seconds), "--device", "cpu", "--truth", str(truth)], stdout=subprocess.DEVNULL)
    wait_for(lambda: read_truth(truth), timeout=120, what="the loop's warm-up (its truth file)")
    return job, truth


def read_truth(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def window_truth(a: dict, b: dict) -> float:
    """The planted line's share of the loop's time between two readings of its truth file."""
    spent = lambda d: d["steps"] * d["step_ms"]  # noqa: E731
    return (b["hot_share"] * spent(b) - a["hot_share"] * spent(a)) / (spent(b) - spent(a))


def as_user():
    """A command prefix that runs as nobody (this process is root), for what ptrace lets another user do."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run a process as another user")
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def attach_as(prefix, pid, window=3):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([*prefix, *tuimon_cmd("attach", pid, "--once", "--json", "--window", window)],
                       capture_output=True, text=True, timeout=120, env=env, cwd="/")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    return json.loads(p.stdout)


def pyspy_children() -> list[int]:
    """py-spy processes this test started (and the stand-in's sleep)."""
    found = []
    for c in psutil.Process().children(recursive=True):
        try:
            argv = c.cmdline()
        except psutil.Error:
            continue
        if "py-spy" in " ".join(argv[:2]) or argv == ["sleep", "1000"]:
            found.append(c.pid)
    return found


# -- a real loop, attached without the probe ------------------------------------------------------


def attach_json(pid, window):
    p = subprocess.run(tuimon_cmd("attach", pid, "--once", "--json", "--window", window), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    return json.loads(p.stdout)


def test_attach_names_the_hot_line_of_a_loop_without_the_probe(tmp_path):
    """Within 5 s of attaching, the hot line; over 12 s (~250 samples: a share's binomial error
    ~0.02), its share against the loop's own timers over the same seconds."""
    needs_pyspy()
    job, truth = start_hotspot(tmp_path)
    try:
        first = attach_json(job.pid, 5)
        before = read_truth(truth)
        snap = attach_json(job.pid, 12)
        after = read_truth(truth)
    finally:
        job.kill()
        job.wait()
    assert "steps" not in first and first["channel"]["na"]  # no probe: no loop timings
    out = first["outside"]
    assert out["state"] == "sampling" and out["tool"].startswith("py-spy") and out["thread"] == "MainThread", out
    assert first["samples"] >= 20
    top = first["hot_lines"][0]
    assert top["phase"] == OUTSIDE_PHASE and f"planted.py:{SPIN_LINE} in spin" in top["line"], first["hot_lines"]
    assert "while time.perf_counter() < end" in top["line"]  # its code, read from the job's file
    assert top["python"] >= 0.8, top  # a Python loop: the GIL held (py-spy --gil) nearly every sample
    v = first["verdict"]  # a verdict from what it has: no GPU here, the main thread's line
    assert v["code"] == "host-bound" and "from outside" in v["headline"], v
    assert "spin" in v["evidence"] and "tuimon run" in v["next_step"] and "wait for a few steps" not in v["next_step"], v
    assert "py-spy" not in first["problems"]

    measured = sum(h["share"] for h in snap["hot_lines"] if " in spin" in h["line"])
    expected = window_truth(before, after)
    print(f"within 5 s: {first['samples']} samples, top {top['share']:.3f}; over 12 s: spin() {measured:.3f} of "
          f"{snap['samples']} samples; the loop's own timers: {expected:.3f} (hot_share {window_truth(before, after):.3f})")
    assert abs(measured - expected) <= 0.1, (measured, expected)


PLAIN_LOOP = ("def hot():\n"
              "    x = 0\n"
              "    for i in range(100000):\n"
              "        x += i * i  # the hot line\n"
              "    return x\n"
              "print('ready', flush=True)\n"
              "while True:\n"
              "    hot()\n")
PLAIN_HOT = "plain_loop.py:4 in hot"


def start_plain_loop(tmp_path):
    """A CPU loop in plain python: no tuimon in its environment, no probe, no channel."""
    script = tmp_path / "plain_loop.py"
    script.write_text(PLAIN_LOOP)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("TUIMON")}
    job = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    assert job.stdout.readline().strip() == "ready"
    return job


def skip_if_ptrace_denied(snap):
    out = snap["outside"]
    if out["state"] == "failed" and "(ptrace denied)" in out["why"]:
        pytest.skip(f"py-spy cannot read a process here: {out['why']}")


def test_once_waits_for_its_window_of_outside_samples(tmp_path):
    """`--once` on a job without the probe prints after py-spy's lines of its --window came, as the
    screen has them: not `hot_lines: []` because the window ended before py-spy's first round."""
    needs_pyspy()
    job = start_plain_loop(tmp_path)
    try:
        snap = attach_json(job.pid, 3)
        skip_if_ptrace_denied(snap)
        text = subprocess.run(tuimon_cmd("attach", job.pid, "--once"), capture_output=True, text=True, timeout=120)
    finally:
        job.kill()
        job.wait()
    assert snap["channel"]["na"] and snap["outside"]["state"] == "sampling", snap["outside"]
    assert snap["outside"]["seconds"] >= 3 and snap["samples"] >= 20, snap["outside"]  # the window's samples
    assert any(PLAIN_HOT in h["line"] and "x += i * i" in h["line"] for h in snap["hot_lines"]), snap["hot_lines"]
    # the default window (0.5 s) too: at least the screen's first round, in the text form
    assert text.returncode == 0 and "Traceback" not in text.stderr, text.stderr
    assert "main thread" in text.stdout and PLAIN_HOT in text.stdout, (text.stdout, text.stderr)


@pytest.mark.asyncio
async def test_the_tui_shows_the_lines_from_outside_and_h_lists_them(tmp_path):
    needs_pyspy()
    from tuimon.ui.app import make_app
    from tuimon.ui.screens import HotLinesScreen
    from tuimon.ui.widgets import Panel

    job, _ = start_hotspot(tmp_path)
    session = LiveSession(job.pid, 0.5, outside=True)
    app = make_app(session, "attached")
    def shown(wid):  # (a panel not drawn yet shows nothing)
        last = app.screen.query_one(wid, Panel)._last
        return last.plain if last is not None else ""

    try:
        async with app.run_test(size=(120, 40)) as pilot:
            end = time.monotonic() + 30
            while "in spin" not in shown("#breakdown") and time.monotonic() < end:
                await pilot.pause(0.2)
            text = shown("#breakdown")
            assert "in spin" in text and "sampled from outside by py-spy" in text, text
            assert "outside: no phases without the probe" in text
            assert "sampled from outside" in shown("#steps")  # (the no-channel words say where the lines are)
            assert "FROM OUTSIDE" in shown("#verdict")
            await pilot.press("h")
            await pilot.pause(0.5)
            assert isinstance(app.screen, HotLinesScreen)
            lines = shown("#hot")
            assert "outside: no phases without the probe" in lines and "in spin" in lines and "Python" in lines, lines
    finally:
        job.kill()
        job.wait()
    assert wait_for(lambda: not pyspy_children(), timeout=10, what="py-spy gone with the app")


def test_the_sampler_stops_when_a_channel_appears_and_on_stop(tmp_path, shm_dir):
    """The probe samples its own loop: once the job's channel shows, py-spy is stopped; stop() ends
    every recorder."""
    needs_pyspy()
    go = tmp_path / "instrument-now"  # (the job takes its channel once the test saw lines: a loaded
    # machine's py-spy can take longer than any fixed time to give its first samples)
    script = (f"import os, time\nwhile not os.path.exists({str(go)!r}): sum(range(1000))\n"
              "import tuimon\ntuimon.instrument()\ntime.sleep(60)\n")
    job = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(ROOT)})
    session = LiveSession(job.pid, 0.5, outside=True)
    try:
        first = session.poll()
        assert first.outside is not None and first.outside.state == "starting"
        lines = wait_for(lambda: (c := session.poll()).outside and c.outside.samples and c.outside, timeout=30,
                         what="lines from outside")
        assert any("<string>" in h.line for h in lines.hot_lines), lines
        assert wait_for(pyspy_children, timeout=10, what="py-spy running")  # (a round may be between recorders)
        go.touch()
        shown = wait_for(lambda: (c := session.poll()).training is not None and c, timeout=60, what="the channel")
        assert shown.outside is None and session.outside.sampler is None
        assert wait_for(lambda: not pyspy_children(), timeout=10, what="py-spy stopped")
    finally:
        session.stop()
        job.kill()
        job.wait()


# -- what stops py-spy, in words ------------------------------------------------------------------


def test_another_users_process_says_why_ptrace_is_denied_and_what_grants_it(sleeper):
    needs_pyspy()
    snap = attach_as(as_user(), sleeper.pid)  # the monitor as nobody, the job as root
    why = snap["problems"]["py-spy"]
    assert snap["outside"]["state"] == "failed" and snap["outside"]["why"] == why and snap["hot_lines"] == []
    assert f"py-spy may not read PID {sleeper.pid}" in why and "(ptrace denied)" in why, why
    assert "it runs as root (uid 0) and tuimon as nobody (uid 65534)" in why, why
    assert "What grants it: the same user with ptrace_scope 0" in why and "CAP_SYS_PTRACE" in why and "root" in why
    assert "ptrace_scope" in why
    assert snap["verdict"]["code"] == "waiting" and "py-spy cannot sample it" in snap["verdict"]["evidence"]


def test_a_process_that_is_not_dumpable_says_so(tmp_path):
    needs_pyspy()
    prefix = as_user()
    script = ("import ctypes, time\nassert ctypes.CDLL(None).prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE\n"
              "print('ready', flush=True)\ntime.sleep(120)\n")
    job = subprocess.Popen([*prefix, sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        assert job.stdout.readline().strip() == "ready"
        snap = attach_as(prefix, job.pid)  # the same user: refused all the same
    finally:
        job.kill()
        job.wait()
    why = snap["problems"]["py-spy"]
    assert "(ptrace denied)" in why and "it is not dumpable (it called prctl(PR_SET_DUMPABLE, 0)" in why, why
    assert "What grants it:" in why and "CAP_SYS_PTRACE" in why


def test_a_process_that_is_not_python_gets_words_not_a_crash():
    needs_pyspy()
    job = subprocess.Popen(["sleep", "60"])
    try:
        p = subprocess.run(tuimon_cmd("attach", job.pid, "--once", "--window", 3), capture_output=True, text=True,
                           timeout=120)
        snap = json.loads(subprocess.run(tuimon_cmd("attach", job.pid, "--once", "--json", "--window", 3),
                                         capture_output=True, text=True, timeout=120).stdout)
    finally:
        job.kill()
        job.wait()
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    said = f"PID {job.pid} (sleep 60) is not a Python process (py-spy finds no Python interpreter in it)"
    assert f"tuimon: py-spy: {said}" in p.stderr, p.stderr
    assert snap["outside"]["state"] == "failed" and said in snap["outside"]["why"]
    assert snap["verdict"]["code"] == "waiting" and snap["process"]["pid"] == job.pid  # (and the numbers it has)


def test_a_shell_that_is_not_python_names_its_python_child():
    needs_pyspy()
    shell = subprocess.Popen(["sh", "-c", f"{sys.executable} -c 'import time; time.sleep(60)'; true"])
    try:
        child = wait_for(lambda: [c.pid for c in psutil.Process(shell.pid).children()  # (once it runs python:
                                  if "python" in os.path.basename((c.cmdline() or [""])[0])],  # sh forks, then execs)
                         what="the shell's python child")[0]
        why = pyspy.not_python(shell.pid)
    finally:
        psutil.Process(child).kill()
        shell.kill()
        shell.wait()
    assert f"its descendant PID {child} (" in why and f"`tuimon attach {child}`" in why, why


def test_a_recorder_that_hangs_is_killed_and_said(tmp_path, monkeypatch, sleeper):
    """A py-spy that never ends its round (here a stand-in that sleeps: no real one hangs on cue) is
    killed GRACE_S after its round, said, and killed at once by stop()."""
    hang = tmp_path / "py-spy"
    hang.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "py-spy 0.0"; exit 0; }\nsleep 1000\n')
    hang.chmod(0o755)
    monkeypatch.setattr(pyspy, "GRACE_S", 1.0)
    s = pyspy.OutsideSampler(sleeper.pid, first_round_s=1, exe=str(hang)).start()
    try:
        failed = wait_for(lambda: s.latest().state == "failed" and s.latest(), timeout=30, what="the round's timeout")
        assert failed.why == "py-spy did not end a 1 s recording within 2 s (killed; trying again)", failed.why
        assert not pyspy_children()  # (killed; the next round comes after RETRY_S)
    finally:
        s.stop()
    s2 = pyspy.OutsideSampler(sleeper.pid, first_round_s=1, exe=str(hang)).start()
    wait_for(lambda: len(pyspy_children()) >= len(pyspy.MODES), what="the hanging recorders")
    started = time.monotonic()
    s2.stop()
    assert time.monotonic() - started < 5 and not pyspy_children()


def test_no_pyspy_says_how_to_get_it(monkeypatch, sleeper):
    monkeypatch.setenv("TUIMON_PYSPY", "/nonexistent/py-spy")
    s = pyspy.OutsideSampler(sleeper.pid).start()
    try:
        failed = wait_for(lambda: s.latest().state == "failed" and s.latest(), what="the failure")
    finally:
        s.stop()
    assert "py-spy is not installed here" in failed.why and "pip install py-spy" in failed.why


# -- py-spy's output, read ------------------------------------------------------------------------

RAW = {  # one round of planted-like stacks: the main thread (TID == PID) and a worker thread
    "all": "thread (100): MainThread;<module> (/job/train.py:50);run (/job/train.py:41);spin (/job/train.py:7) 30\n"
           "thread (100): MainThread;<module> (/job/train.py:50);run (/job/train.py:43);"
           "sleep (/usr/lib/python3.11/threading.py:320) 10\n"
           "thread (100): MainThread;<module> (/job/train.py:50);run (/job/train.py:42);"
           "_call_impl (/v/lib/python3.11/site-packages/torch/nn/modules/module.py:1778) 10\n"
           "thread (101): Thread-1 (worker);_bootstrap (/usr/lib/python3.11/threading.py:1002) 50\n",
    "active": "thread (100): MainThread;<module> (/job/train.py:50);run (/job/train.py:41);spin (/job/train.py:7) 30\n"
              "thread (100): MainThread;<module> (/job/train.py:50);run (/job/train.py:42);"
              "_call_impl (/v/lib/python3.11/site-packages/torch/nn/modules/module.py:1778) 8\n",
    "gil": "thread (100): MainThread;<module> (/job/train.py:50);run (/job/train.py:41);spin (/job/train.py:7) 27\n"
           "thread (100): MainThread;<module> (/job/train.py:50);run (/job/train.py:42);"
           "_call_impl (/v/lib/python3.11/site-packages/torch/nn/modules/module.py:1778) 2\n",
}


def test_raw_stacks_become_lines_of_the_jobs_own_code_with_how_the_thread_was():
    s = pyspy.OutsideSampler(100)
    s._cwd = "/job"
    s._add({mode: (raw, "Samples: 100 Errors: 3") for mode, raw in RAW.items()}, 2)
    o = s.latest()
    assert (o.state, o.samples, o.threads, o.thread, o.errors) == ("sampling", 50, 2, "MainThread", 3)
    lines = {h.line: h for h in o.hot_lines}
    assert list(lines) == ["train.py:7 in spin", "train.py:43 in run", "train.py:42 in run"]  # (torch, stdlib: not the job's)
    spin, sleep, model = lines.values()
    assert (spin.share, spin.python, spin.native, spin.waiting) == (0.6, 0.9, 0.1, 0.0)
    assert (sleep.share, sleep.python, sleep.native, sleep.waiting) == (0.2, 0.0, 0.0, 1.0)
    assert (model.python, model.native, model.waiting) == (0.2, 0.6, 0.2)
    assert all(h.phase == OUTSIDE_PHASE and h.phase_share == h.share for h in o.hot_lines)


def test_odd_raw_lines_are_skipped_and_a_thread_in_native_code_only_is_counted():
    s = pyspy.OutsideSampler(7)
    s._cwd = "/"  # (a job running in /: its files relative to it)
    raw = ("garbage\nthread (7): MainThread 5\nthread (7): MainThread;weird frame 2\n"
           "thread (0x7F00): MainThread;f (/a b (c)/x.py:3) 3\nthread (8): other;f (/x.py:1) notanumber\n")
    s._add({"all": (raw, "")}, 2)
    o = s.latest()
    assert o.samples == 10 and o.threads == 2  # (a hex thread id: a Python without native ids, named MainThread)
    assert {h.line: h.samples for h in o.hot_lines} == {"(no Python frame)": 7, "a b (c)/x.py:3 in f": 3}
    assert all(h.python == h.native == h.waiting == 0.0 for h in o.hot_lines)  # (no --gil/--idle split this round)


# -- the view, the JSON and the panels without the probe ------------------------------------------


def test_view_json_and_panels_show_the_lines_from_outside():
    s = pyspy.OutsideSampler(100)
    s._cwd = "/job"
    s._add({mode: (raw, "") for mode, raw in RAW.items()}, 2)
    state = MonitorState()
    from tuimon.model import NA
    state.apply(Cycle(t=1, process=ProcessSample(pid=100, t=1), channel=NA("PID 100 has no tuimon channel"),
                      outside=s.latest()))
    view = state.view()
    doc = view_json(view, 100)
    assert doc["samples"] == 50 and doc["hot_lines"][0]["line"] == "train.py:7 in spin"
    assert doc["outside"]["state"] == "sampling" and "hot_lines" not in doc["outside"]
    assert doc["verdict"]["code"] == "host-bound" and "60% at train.py:7 in spin (Python 90%)" in doc["verdict"]["evidence"]
    panel = breakdown_panel(view, 100).plain
    assert "main thread (MainThread) of PID 100, sampled from outside by py-spy at 25 Hz · 50 samples" in panel
    assert " 60%  train.py:7 in spin  Python 90%" in panel and "outside: no phases without the probe" in panel
    h = hot_lines_text(view, 100).plain
    assert "outside: no phases without the probe" in h and "Python 0% · native 0% · blocked 100%" in h
