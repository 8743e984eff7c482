"""The edges a new user meets (issue 13): no terminal, signals, options that make no sense, help,
broken pipes, replays of odd files, strings from the job in JSON. Real commands, real processes."""

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, tuimon_cmd, wait_for
from tuimon.channel import SegmentWriter
from tuimon.channel import layout as L
from tuimon.channel.meta import JobMeta

PLANTED = str(ROOT / "tests" / "workloads" / "planted_wait.py")
FIXTURE = str(ROOT / "tests" / "fixtures" / "h100_demo_v2.jsonl")


def tuimon(*args, timeout=60, stdin=subprocess.DEVNULL, **kw):
    return subprocess.run(tuimon_cmd(*args), capture_output=True, text=True, timeout=timeout, stdin=stdin, **kw)


# 1. no terminal ----------------------------------------------------------------------------------

def test_without_a_terminal_top_and_replay_refuse_and_attach_goes_plain(tmp_path, sleeper):
    for args in (("top",), ("replay", FIXTURE)):
        t0 = time.monotonic()
        p = tuimon(*args)
        assert p.returncode == 2 and "needs a terminal" in p.stderr and p.stdout == "", (args, p.stderr)
        assert time.monotonic() - t0 < 20 and "\x1b[" not in p.stdout
    assert "top --once" in tuimon("top").stderr
    out = tmp_path / "out"
    with open(out, "w") as f:
        p = subprocess.Popen(tuimon_cmd("attach", sleeper.pid, "--interval", "0.2"), stdin=subprocess.DEVNULL,
                             stdout=f, stderr=subprocess.PIPE, text=True)
        time.sleep(2.5)
        p.send_signal(signal.SIGINT)
        err = p.communicate(timeout=20)[1]
    assert "no terminal here: one line per interval instead" in err
    text = out.read_text()
    assert text.startswith(f"pid {sleeper.pid} | no channel") and "\x1b[" not in text


def on_a_pty(args, env, until: bytes, timeout=20.0):
    """(what tuimon wrote to its terminal, its stderr, its exit code): run on a pseudo-terminal
    until it writes `until` (or timeout), then Ctrl-C'd as a signal."""
    master, slave = pty.openpty()
    p = subprocess.Popen(tuimon_cmd(*args), stdin=slave, stdout=slave, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    out, end = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < end and until not in out and p.poll() is None:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    out += os.read(master, 65536)
                except OSError:  # (EIO: it closed its end)
                    break
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
        err = p.communicate(timeout=20)[1].decode()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)
    return out, err, p.returncode


def test_term_dumb_gets_plain_lines_not_the_screen(sleeper):
    """TERM=dumb (Emacs's shell, some CI logs) cannot draw a screen: attach follows in plain lines,
    top refuses (issue 43, item 21)."""
    env = {**os.environ, "TERM": "dumb"}
    out, err, _ = on_a_pty(("attach", sleeper.pid, "--interval", "0.2"), env, until=b"| no channel")
    assert f"pid {sleeper.pid} | no channel".encode() in out and b"\x1b[" not in out, out[:300]
    assert "tuimon: TERM=dumb: this terminal cannot draw a screen: one line per interval instead (--plain)" in err
    out, err, code = on_a_pty(("top",), env, until=b"\x1b[")
    assert code == 2 and b"\x1b[" not in out and "top needs a terminal that can draw a screen (TERM=dumb" in err


# 2. which process is shown --------------------------------------------------------------------------

def test_attach_to_init_never_picks_an_orphan():
    snap = json.loads(tuimon("attach", 1, "--once", "--json").stdout)
    assert snap["pid"] == 1 and "does not search its descendants" in snap["channel"]["na"]
    assert "steps" not in snap


# 3. exit codes after signals ------------------------------------------------------------------------

def test_a_job_killed_by_a_signal_gives_128_plus_n():
    p = tuimon("run", "--plain", "--", sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert p.returncode == 137 and p.stderr.splitlines()[-1] == "tuimon: the job was killed by SIGKILL"


@pytest.mark.parametrize("workers", [0, 2])
def test_the_demo_workload_stops_quietly_on_ctrl_c(tmp_path, workers):
    """With workers it stops at the end of a step: interrupted inside a fetch, a worker printed a
    traceback (1 in 40 tries here; none in 80 since)."""
    p = subprocess.Popen([sys.executable, "-m", "tuimon.workloads.demo_train", "--workers", str(workers), "--delay", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.stdout.readline().startswith("demo workload on cpu")
    time.sleep(1)
    p.send_signal(signal.SIGINT)
    out = p.communicate(timeout=30)[0]
    assert p.returncode == 0 and "Traceback" not in out and "demo workload stopped" in out


# 5. the up timer stops with the process ------------------------------------------------------------

def test_uptime_stops_when_the_job_exits(shm_dir):
    job = subprocess.run(tuimon_cmd("run", "--headless", "--", sys.executable, "-c",
                                    "import time, tuimon; [tuimon.step() or time.sleep(0.01) for _ in range(50)]"),
                         timeout=60)
    assert job.returncode == 0
    [path] = [os.path.join(shm_dir, f) for f in os.listdir(shm_dir)]
    pid = int(path.rsplit("-", 1)[1])
    first = json.loads(tuimon("attach", pid, "--once", "--json").stdout)["uptime_s"]
    time.sleep(1.5)
    assert json.loads(tuimon("attach", pid, "--once", "--json").stdout)["uptime_s"] == first


# 6. record does not overwrite; - is standard output -----------------------------------------------

def test_record_keeps_an_existing_file_and_writes_to_stdout(tmp_path, sleeper):
    keep = tmp_path / "keep.jsonl"
    keep.write_text("precious\n")
    p = tuimon("record", sleeper.pid, "-o", keep, "--seconds", "0.5", "--interval", "0.2")
    assert p.returncode == 2 and "exists: --force to overwrite it" in p.stderr and keep.read_text() == "precious\n"
    p = tuimon("record", sleeper.pid, "-o", keep, "--seconds", "0.5", "--interval", "0.2", "--force")
    assert p.returncode == 0 and keep.read_text().startswith('{"format":"tuimon-recording","version":2')
    p = tuimon("record", sleeper.pid, "-o", "-", "--seconds", "0.5", "--interval", "0.2", cwd=tmp_path)
    assert p.returncode == 0 and not (tmp_path / "-").exists()
    lines = p.stdout.splitlines()
    assert json.loads(lines[0])["version"] == 2 and len(lines) >= 3 and "recorded" in p.stderr


# 7. options that make no sense -----------------------------------------------------------------------

@pytest.mark.parametrize("args, says", [
    (("record", "1", "-o", "x", "--seconds", "-5"), "argument --seconds: -5 is out of range: 0 to 1e+07 seconds"),
    (("record", "1", "-o", "x", "--seconds", "nan"), "argument --seconds: nan is out of range"),
    (("replay", FIXTURE, "--speed", "0"), "argument --speed: 0 is out of range: 0.01 to 1000"),
    (("replay", FIXTURE, "--speed", "-1"), "argument --speed: -1 is out of range"),
    (("attach", "1", "--once", "--window", "inf"), "argument --window: inf is out of range: 0 to 3600 seconds"),
    (("capture", "1", "--timeout", "-1"), "argument --timeout: -1 is out of range"),
    (("capture", "1", "--steps", "0"), "argument --steps: 0 is out of range: 1 to 500 steps"),
    (("attach", "1", "--json"), "--json goes with --once"),
    (("attach", "1", "--window", "3"), "--window goes with --once"),
    (("top", "--json"), "--json goes with --once"),
    (("attach", "1", "--gpus", "a,b"), "not a list of GPU indices"),
])
def test_meaningless_options_are_refused_by_name(args, says):
    p = tuimon(*args)
    assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_capture_still_running_at_its_timeout_says_so(shm_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TUIMON_CAPTURE_DIR", str(tmp_path / "caps"))
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, PLANTED, 3000, 0.02, 0.004),
                           stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "training"
        p = tuimon("capture", job.pid, "--steps", 200, "--wait", "--timeout", "0.5")
        assert p.returncode == 1, p.stderr
        assert "is still armed after 0.5 s" in p.stderr or "is still capturing after 0.5 s" in p.stderr
        assert "it goes on in the job" in p.stderr
    finally:
        job.kill()
        job.wait()


# 10. help and version ------------------------------------------------------------------------------

def test_help_and_version():
    p = tuimon()
    assert p.returncode == 2 and "COMMAND" in p.stderr and "attach" in p.stderr and "required" not in p.stderr
    p = tuimon("--version")
    assert p.returncode == 0 and p.stdout.strip().startswith("tuimon 0.")
    for cmd in ("attach", "run", "demo", "top", "record", "capture"):
        helptext = tuimon(cmd, "--help").stdout
        assert "--interval" not in helptext or "seconds between samples" in helptext
    assert "-o OUTPUT, --output OUTPUT" in tuimon("record", "--help").stdout


def test_every_argument_of_every_command_says_what_it_is():
    import argparse

    from tuimon.cli.main import parser

    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    silent = [f"{name} {a.dest}" for name, cmd in sub.choices.items() for a in cmd._actions
              if not isinstance(a, argparse._HelpAction) and not a.help]
    assert silent == []


def test_a_command_parsed_alone_as_among_all():
    """main() builds only the command's own parser (the start of `attach` waits for it): each command
    alone holds the same arguments, in the same order, with the same defaults, as in the full parser."""
    import argparse

    from tuimon.cli.main import COMMANDS, parser

    def subs(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        return next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices

    def shape(p: argparse.ArgumentParser) -> list[tuple]:
        return [(a.option_strings, a.dest, a.default, a.nargs, a.help) for a in p._actions] + \
            [(name, shape(sp)) for name, sp in subs(p).items()] if any(
                isinstance(a, argparse._SubParsersAction) for a in p._actions) else \
            [(a.option_strings, a.dest, a.default, a.nargs, a.help) for a in p._actions]

    full = subs(parser())
    assert tuple(full) == COMMANDS
    for name in COMMANDS:
        alone = subs(parser(name))
        assert list(alone) == [name]
        assert shape(alone[name]) == shape(full[name]), name
        assert alone[name].get_default("func") is not None or name == "baseline"  # (its actions have theirs)


# 16. replays of odd files, broken pipes ----------------------------------------------------------

def test_replay_of_a_header_only_file(tmp_path):
    f = tmp_path / "empty.jsonl"
    f.write_text(json.dumps({"format": "tuimon-recording", "version": 2}) + "\nnot json\n")
    p = tuimon("replay", f)
    assert p.returncode == 2 and "has no samples (a header and 1 unreadable lines)" in p.stderr


def test_a_closed_pipe_ends_quietly(sleeper):
    p = subprocess.run(f"{' '.join(tuimon_cmd('attach', sleeper.pid, '--plain', '--interval', '0.1'))} | head -1",
                       shell=True, capture_output=True, text=True, timeout=60)
    assert p.stdout.startswith(f"pid {sleeper.pid}") and "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr


# 15. strings from the job: true in JSON, inert on a terminal ------------------------------------

def test_hostile_names_are_true_in_json_and_inert_in_text(shm_dir):
    code = """
import time, tuimon
tuimon.instrument()
print("up", flush=True)
for _ in range(3000):
    with tuimon.range("evil\\x1b[2J\\x07"):
        time.sleep(0.001)
    tuimon.step()
"""
    job = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "up"
        raw = wait_for(lambda: (p := tuimon("attach", job.pid, "--once", "--json")) and '"ranges": [' in p.stdout
                       and json.loads(p.stdout)["ranges"] and p.stdout, what="ranges")
        assert "\\u001b[2J\\u0007" in raw and json.loads(raw)["ranges"][0]["name"] == "evil\x1b[2J\x07"
        line = wait_for(lambda: (p := tuimon("attach", job.pid, "--once")) and "ranges" in p.stdout and p.stdout,
                        what="a text line")
        assert "evil\\x1b[2J\\x07" in line and "\x1b" not in line
    finally:
        job.kill()
        job.wait()


# 13. ls ------------------------------------------------------------------------------------------------

def test_ls_has_a_header_command_and_rank(shm_dir):
    w = SegmentWriter.create(JobMeta(argv=("python", "train.py", "--lr", "3e-4"), rank=1, world_size=2), 64)
    L.U64.pack_into(w._mm, L.OFF_HEARTBEAT_NS, time.monotonic_ns())
    out = tuimon("ls").stdout.splitlines()
    assert out[0].split() == ["PID", "STATE", "RANK", "COMMAND", "JOB", "OUTPUT"]
    assert out[1].split()[:4] == [str(os.getpid()), "alive", "1/2", "python"] and "train.py --lr 3e-4" in out[1]


# 17. top --once -------------------------------------------------------------------------------------

def test_top_once_says_what_it_has():
    p = tuimon("top", "--once")
    assert p.returncode == 0 and "host: CPU" in p.stdout
    doc = json.loads(tuimon("top", "--once", "--json").stdout)
    assert doc["host"]["cpus"] >= 1 and doc["host"]["mem_total"] > 0
    if not doc["gpus"]:  # no GPU here (CI): the reason, not an empty success
        assert "no GPU data: " in p.stdout and doc["problems"]["gpu"]


def test_gpus_picks_gpus_by_index_and_names_one_that_is_not_there():
    from tests.fake_nvml import FakeNvml
    from tuimon.monitor.session import LiveSession
    from tuimon.monitor.state import MonitorState
    from tuimon.sources.nvml import DeviceSampler
    from tuimon.ui.plain import top_text

    def view(gpus):
        session = LiveSession(None, 1.0, devices=DeviceSampler(FakeNvml(gpus=3)), gpus=gpus)
        state = MonitorState()
        state.apply(session.poll())
        return state.view()

    v = view([0, 2])
    assert [g.latest.index for g in v.gpus] == [0, 2] and "gpu" not in v.problems
    v = view([1, 7])
    assert [g.latest.index for g in v.gpus] == [1]
    assert v.problems["gpu"] == "no GPU 7 here: NVML sees 3 GPUs (indices 0 to 2)"
    assert "no GPU 7 here" in top_text(v) and "GPU 1 NVIDIA H200" in top_text(v)
