"""`tuimon baseline save/show` and `--baseline` on the command line: what each refuses, in words."""

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, tuimon_cmd
from tuimon.analysis import thresholds as T

H100 = str(ROOT / "tests" / "fixtures" / "h100_demo_v2.jsonl")


def tm(*args, timeout=60):
    return subprocess.run(tuimon_cmd(*args), capture_output=True, text=True, timeout=timeout)


def test_save_from_a_recording_then_show_and_use_it_in_a_replay_and_an_export(tmp_path):
    out = str(tmp_path / "b.json")
    p = tm("baseline", "save", "--recording", H100, "-o", out)
    assert p.returncode == 0, p.stderr
    assert "GPU: NVIDIA H100 80GB HBM3" in p.stdout and f"saved to {out}" in p.stdout
    shown = tm("baseline", "show", out)
    assert shown.returncode == 0 and shown.stdout.splitlines()[:3] == p.stdout.splitlines()[:3]
    again = tm("baseline", "save", "--recording", H100, "-o", out)
    assert again.returncode == 2 and "exists: --force" in again.stderr
    assert tm("baseline", "save", "--recording", H100, "-o", out, "--force").returncode == 0


def test_what_is_refused(tmp_path, sleeper):
    out = str(tmp_path / "b.json")
    p = tm("baseline", "save", 2**22 + 7, "-o", out)
    assert p.returncode == 2 and "no process with PID" in p.stderr
    p = tm("baseline", "save", sleeper.pid, "-o", out, "--seconds", 600)  # no channel: refused before measuring
    assert p.returncode == 2 and "has no tuimon channel" in p.stderr and "measuring" not in p.stderr, p.stderr
    p = tm("baseline", "save", "--recording", str(tmp_path / "none.jsonl"), "-o", out)
    assert p.returncode == 2 and "cannot read" in p.stderr and "No such file" in p.stderr
    (tmp_path / "junk.json").write_text("{}")
    junk = ("--baseline", str(tmp_path / "junk.json"))
    for args in (("attach", sleeper.pid, *junk), ("replay", H100, *junk), ("export", "--port", 0, *junk),
                 ("run", *junk, "--", "true")):
        p = tm(*args)
        assert p.returncode == 2 and "junk.json is not a tuimon baseline" in p.stderr, (args, p.stderr)
    p = tm("baseline", "show", str(tmp_path / "junk.json"))
    assert p.returncode == 2 and "is not a tuimon baseline" in p.stderr
    assert tm("baseline", "save", "--recording", H100, "-o", out).returncode == 0
    p = tm("run", "--headless", "--baseline", out, "--", "true")
    assert p.returncode == 2 and "--headless runs no monitor" in p.stderr
    p = tm("attach", sleeper.pid, "--once", "--json", "--baseline", out)  # no channel: nothing to compare, rc 0
    assert p.returncode == 0 and '"state": "collecting"' in p.stdout and '"progress": "collecting: no steps yet"' in p.stdout
    assert "tuimon: baseline collecting: no steps yet: no decision on the step time yet" in p.stderr


LOOP = """
import sys, time, tuimon
tuimon.instrument()
print("up", flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    time.sleep(0.01)
    tuimon.step()
"""


@pytest.fixture
def loop():
    """A real job with a channel and steps, for as long as a test wants (it exits after 120 s)."""
    jobs = []

    def start(seconds=120):
        p = subprocess.Popen([sys.executable, "-c", LOOP, str(seconds)], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline() == "up\n"
        jobs.append(p)
        return p

    yield start
    for p in jobs:
        p.kill()
        p.wait()


def test_an_output_that_cannot_be_written_is_refused_before_measuring(tmp_path, loop):
    """Each of these used to measure the full --seconds, then fail."""
    job = loop()
    folder = tmp_path / "folder"
    folder.mkdir()
    for output, force, says in (("/nonexistent/dir/x.json", False, "cannot write /nonexistent/dir/x.json: No such file"),
                                ("", False, "-o is empty"),
                                (str(folder), True, f"{folder} is a folder: -o names a file"),
                                (str(folder), False, f"{folder} is a folder")):
        p = tm("baseline", "save", job.pid, "-o", output, "--seconds", 600, *(["--force"] if force else []))
        assert p.returncode == 2 and says in p.stderr and "measuring" not in p.stderr, (output, p.stderr)
    assert list(folder.iterdir()) == [] and job.poll() is None


WARMED_UP_S = T.REGRESSION_WARMUP_S.value + 0.5  # a baseline leaves a job's first 10 s out
ENOUGH_S = T.REGRESSION_BATCHES.value * T.REGRESSION_BATCH_S.value + 2.5  # ...and needs 10 batches of 0.9 s


def test_dash_is_standard_output(tmp_path, loop):
    job = loop()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    time.sleep(WARMED_UP_S)
    p = subprocess.run(tuimon_cmd("baseline", "save", job.pid, "-o", "-", "--seconds", ENOUGH_S, "--interval", 0.5),
                       capture_output=True, text=True, timeout=60, cwd=cwd)
    assert p.returncode == 0, p.stderr
    assert list(cwd.iterdir()) == []  # (no file named -)
    doc = json.loads(p.stdout)
    assert doc["format"] == "tuimon-baseline" and doc["steps"] >= 200 and len(doc["batch_ms"]) >= 10
    assert "written to standard output" in p.stderr and "baseline of" in p.stderr


def source(path) -> str:
    return json.loads(path.read_text())["source"]


def test_the_file_says_the_time_actually_measured(tmp_path, loop):
    """Ctrl-C some seconds in, or a job that exits before --seconds: the time measured, not asked
    (both jobs past their warm-up, measured at once)."""
    out, out2 = tmp_path / "ctrl-c.json", tmp_path / "exited.json"
    job, short = loop(), loop(seconds=WARMED_UP_S + ENOUGH_S + 2)
    time.sleep(WARMED_UP_S)
    p = subprocess.Popen(tuimon_cmd("baseline", "save", job.pid, "-o", out, "--seconds", 60, "--interval", 0.5),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p2 = subprocess.Popen(tuimon_cmd("baseline", "save", short.pid, "-o", out2, "--seconds", 60, "--interval", 0.5),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stderr.readline().startswith(f"tuimon: measuring PID {job.pid} for 60 s")
    time.sleep(ENOUGH_S)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 0, stderr
    said = source(out)
    assert said.startswith(f"PID {job.pid} for ") and said.endswith(" s (of 60 s: Ctrl-C)"), said
    assert 3 < float(said.split(" for ")[1].split(" s")[0]) < 40, said
    assert "Traceback" not in stderr

    stdout, stderr = p2.communicate(timeout=90)
    assert p2.returncode == 0, stderr
    said = source(out2)
    assert said.endswith(" s (until it exited)") and float(said.split(" for ")[1].split(" s")[0]) < 30, said


def test_text_outputs_say_the_baseline_is_of_another_program(tmp_path, loop):
    """`--once` and `--plain` carry the notes the TUI and JSON show, the ranks among them (while
    collecting too: a fresh job is in its warm-up)."""
    from tuimon.model import BASELINE_VERSION, Baseline, StepTimes
    from tuimon.monitor.baseline import dumps

    base = tmp_path / "ddp.json"
    base.write_text(dumps(Baseline(version=BASELINE_VERSION, created="2026-01-01T00:00:00+0000", source="PID 1 for 30 s",
                  step_ms=[80.0 + i % 3 for i in range(200)],
                  command=["python", "train_ddp.py"], rank=0, world_size=2, steps=200,
                  step_time_ms=StepTimes(p50=81.0, p95=82.0, p99=82.0, mean=81.0, last=80.0),
                  batch_steps=[12] * 16, batch_ms=[972.0] * 16)))
    job = loop()
    notes = "(baseline of another program: train_ddp.py) (baseline: 2 ranks; this job: 1 process)"
    p = tm("attach", job.pid, "--once", "--window", 3, "--baseline", base)
    assert p.returncode == 0 and "baseline: collecting: warm-up" in p.stdout and p.stdout.rstrip().endswith(notes), p.stdout
    plain = subprocess.Popen(tuimon_cmd("attach", job.pid, "--plain", "--interval", 0.5, "--baseline", base),
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in plain.stdout:
            assert notes in line, line
            if "faster than baseline" in line:
                break
        else:
            raise AssertionError("--plain never compared")
    finally:
        plain.kill()
        plain.wait()
    doc = json.loads(tm("attach", job.pid, "--once", "--json", "--window", 3, "--baseline", base).stdout)
    assert doc["baseline"]["notes"] == ["baseline of another program: train_ddp.py", "baseline: 2 ranks; this job: 1 process"]


def _hung_job(shm_dir, pid, quiet_s):
    """A channel for process pid (a sleeper) whose loop made 60 steps of 0.1 s, the last ending
    quiet_s ago, and none since: a job hung mid-run, as the monitor reads it."""
    import os

    from tests.conftest import seg_path
    from tuimon.channel import SegmentWriter, procinfo
    from tuimon.channel import layout as L
    from tuimon.channel.meta import JobMeta

    w = SegmentWriter.create(JobMeta(argv=("python", "-m", "tuimon.workloads.demo_train")), 1 << 10)
    L.U32.pack_into(w._mm, 52, pid)  # (relabelled as the sleeper's: test_cli's _segment_for)
    L.U64.pack_into(w._mm, 56, procinfo.start_ticks(pid))
    os.rename(w.path, seg_path(shm_dir, pid))
    last = time.monotonic_ns() - int(quiet_s * 1e9)
    for k in range(1, 61):
        w.emit(L.STEP, 0, 0, 1, k, last - (61 - k) * 10**8, last - (60 - k) * 10**8, 0.0)
    w.set_steps(60, last)
    return w


def test_a_hung_job_fails_the_gate_with_the_stall_named(tmp_path, shm_dir, sleeper):
    """Issue 43 item 11: a job stalled 107 s, measured for 2 s against a good baseline, said
    'collecting ... a longer --window' and exited 0 (no finished step in the window: no decision):
    it exits 3, and the JSON and stderr name the stall."""
    from tests.test_ui import h100_baseline
    from tuimon.monitor.baseline import dumps

    good = tmp_path / "good.json"
    good.write_text(dumps(h100_baseline()))
    w = _hung_job(shm_dir, sleeper.pid, 107)
    p = tm("attach", sleeper.pid, "--once", "--json", "--window", 2, "--baseline", good)
    doc = json.loads(p.stdout)
    assert p.returncode == 3, (p.returncode, p.stderr)
    assert doc["verdict"]["code"] == "stalled" and doc["baseline"]["halted"].startswith("stalled: ")
    assert re.search(r"no step for 1\d\d s \(bar 20 s\)", doc["baseline"]["halted"]), doc["baseline"]
    assert "tuimon: baseline: the job makes no progress: stalled: " in p.stderr and "a longer --window" not in p.stderr
    w.unlink()
