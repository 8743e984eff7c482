"""Capture windows against real probe processes (torch.profiler mode on the CPU), the control-block
protocol and its refusals, and the nsys command line."""

import gzip
import json
import os
import re
import signal
import subprocess
import sys

import pytest

from tests.conftest import ROOT, seg_path, tuimon_cmd, wait_for
from tuimon.capture.client import CaptureClient, CaptureRefused
from tuimon.capture.trace_summary import summarize as trace_summary
from tuimon.channel import SegmentReader
from tuimon.channel import layout as L
from tuimon.channel.control import ControlBlock, open_control
from tuimon.channel.fileview import MappedView
from tuimon.channel.paths import safe_file_part

PLANTED = str(ROOT / "tests" / "workloads" / "planted_wait.py")

NO_STEPS = """
import time, tuimon, torch
tuimon.instrument()
print("up", flush=True)
x = torch.randn(64, 64)
end = time.time() + 60
while time.time() < end:
    with tuimon.range("matmul"):
        x = (x @ x).tanh()
    time.sleep(0.002)
"""


@pytest.fixture(autouse=True)
def capture_dir(tmp_path, monkeypatch):
    d = tmp_path / "captures"
    monkeypatch.setenv("TUIMON_CAPTURE_DIR", str(d))
    return d


def start_job(*args):
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, *map(str, args)),
                           stdout=subprocess.PIPE, text=True)
    assert job.stdout.readline().strip() in ("training", "up")
    return job


def client_for(shm_dir, pid):
    r = SegmentReader(seg_path(shm_dir, pid))
    return CaptureClient(r.path, r.info.pid, r.info.start_ticks)


def test_a_window_of_steps_through_the_cli(shm_dir, capture_dir):
    job = start_job(PLANTED, 2000, 0.02, 0.004)
    try:
        p = subprocess.run(tuimon_cmd("capture", job.pid, "--steps", 5, "--wait"), capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        assert lines[0] == f"asked PID {job.pid} for a torch.profiler capture of 5 steps (request 1)"
        done = [x for x in lines if x.strip().startswith("done: steps")][0]
        first, last = map(int, done.split("steps ")[1].split()[0].split(".."))
        assert last - first + 1 == 5
        trace = next(x for x in lines if x.endswith(".pt.trace.json.gz"))
        assert os.path.dirname(trace) == str(capture_dir) and os.stat(capture_dir).st_mode & 0o777 == 0o700
        with gzip.open(trace) as f:
            assert json.load(f)["traceEvents"]  # loads as a Chrome/Perfetto trace
        # The top rows are the job's own model ops (which of them ranks first varies with the machine),
        # listed longest first.
        rows = lines[lines.index("top operators by self time on the host:") + 1:]
        assert 1 <= len(rows) <= 5
        ms = [float(r.split()[0]) for r in rows]
        assert ms == sorted(ms, reverse=True)
        assert any(op in "".join(rows) for op in ("aten::linear", "aten::addmm", "aten::mse_loss"))
        assert not any(x.strip().startswith("armed: steps") for x in lines)  # an armed window has no steps yet
        assert job.poll() is None  # the job goes on
    finally:
        job.kill()
        job.wait()


def test_ctrl_c_while_waiting_says_the_window_goes_on_in_the_job(shm_dir, capture_dir):
    """As --timeout says it, with Ctrl-C's exit status and no traceback; and the window does go on."""
    job = start_job(PLANTED, 3000, 0.02, 0.004)
    try:
        p = subprocess.Popen(tuimon_cmd("capture", job.pid, "--steps", 60, "--wait"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        assert p.stdout.readline().startswith(f"asked PID {job.pid} for a torch.profiler capture of 60 steps")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 130 and "Traceback" not in err, err
        assert err.strip().endswith(f"capture 1 goes on in the job (follow it in `tuimon attach {job.pid}`, "
                                    "l lists the captures)"), err
        client = client_for(shm_dir, job.pid)
        st = wait_for(lambda: (s := client.status()).state == "done" and s, 120, "the window to end in the job")
        assert st.seq == 1 and st.path.endswith(".pt.trace.json.gz") and os.path.exists(st.path)
    finally:
        job.kill()
        job.wait()


def test_ctrl_c_says_what_became_of_the_window_in_each_case():
    """tuimon capture's words at Ctrl-C (cli/capture.py), for the cases a live job cannot reach on
    demand: before the request, after the window ended, an nsys window stopped from here."""
    from tuimon.capture.nsys_session import SessionWindows
    from tuimon.cli.capture import _interrupted
    from tuimon.model import CaptureStatus

    assert _interrupted(None, None, None, 7) == "interrupted before a capture was asked for"
    ended = CaptureStatus(seq=3, state="done", kind="torch.profiler", path="/c/w.pt.trace.json.gz")
    assert _interrupted(3, ended, None, 7) == "interrupted; capture 3 ended (done): /c/w.pt.trace.json.gz"
    running = CaptureStatus(seq=3, state="capturing", kind="nsys")
    nsys = object.__new__(SessionWindows)  # (only its kind matters here)
    assert _interrupted(3, running, nsys, 7) == "interrupted: stopping nsys window 3 (nsys still writes its report)"
    assert _interrupted(3, running, object(), 7) == ("interrupted; capture 3 goes on in the job (follow it in "
                                                     "`tuimon attach 7`, l lists the captures)")


CHDIR_JOB = """
import os, runpy, sys
os.chdir(sys.argv[1])
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_relative_captures_dir_is_where_the_job_started_though_it_changes_directory(tmp_path, monkeypatch):
    """The trace lands under the folder the job started in, at an absolute path that a monitor
    anywhere reads (it went under the job's new cwd, and the monitor said 'not there')."""
    start, elsewhere, other = tmp_path / "start", tmp_path / "elsewhere", tmp_path / "other"
    for d in (start, elsewhere, other):
        d.mkdir()
    monkeypatch.setenv("TUIMON_CAPTURE_DIR", "caps")
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, "-c", CHDIR_JOB, elsewhere, PLANTED,
                                      3000, 0.02, 0.004), stdout=subprocess.PIPE, text=True, cwd=start)
    try:
        assert job.stdout.readline().strip() == "training"
        for n, cwd in enumerate((start, other), 1):  # a monitor where the job started, and one elsewhere
            p = subprocess.run(tuimon_cmd("capture", job.pid, "--steps", 5, "--wait"), capture_output=True,
                               text=True, timeout=120, cwd=cwd)
            assert p.returncode == 0, p.stderr
            trace = next(x for x in p.stdout.splitlines() if x.endswith(".pt.trace.json.gz"))
            assert os.path.dirname(trace) == str(start / "caps") and os.path.exists(trace), trace
            assert "top operators by self time on the host:" in p.stdout, p.stdout
            assert len(os.listdir(start / "caps")) == n
        assert not (elsewhere / "caps").exists()
    finally:
        job.kill()
        job.wait()


def test_captures_dir_is_absolute_and_fixed_at_its_first_use(tmp_path, monkeypatch):
    from tuimon.channel.paths import captures_dir

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TUIMON_CAPTURE_DIR", f"caps-{os.getpid()}-{id(tmp_path)}")
    first = captures_dir(create=False)
    assert os.path.isabs(first) and os.path.dirname(first) == str(tmp_path)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert captures_dir() == first and os.path.isdir(first) and not os.listdir(tmp_path / "sub")


def test_protocol_states_and_refusals(shm_dir, capture_dir, monkeypatch):
    job = start_job(PLANTED, 2000, 0.02, 0.004)
    try:
        c = client_for(shm_dir, job.pid)
        assert c.status().state == "idle" and c.status().message == "ready"
        seq = c.request(steps=30)
        with pytest.raises(CaptureRefused, match="already"):
            wait_for(lambda: c.status().busy, what="armed")
            c.request(steps=5)
        seen = []
        st = c.wait(seq, 60, on_change=lambda s: seen.append(s.state))
        assert st.state == "done" and st.last_step - st.first_step + 1 == 30
        assert "capturing" in seen and seen[-1] == "done"
        for bad in ({"steps": 0}, {"steps": 10_000}, {"seconds": 1000.0}, {}):
            with pytest.raises(CaptureRefused):
                c.request(**bad)
        monkeypatch.setenv("TUIMON_CAPTURE_MIN_FREE_MB", str(10**9))
        with pytest.raises(CaptureRefused, match="MiB free in"):
            c.request(steps=5)
    finally:
        job.kill()
        job.wait()
    with pytest.raises(CaptureRefused, match="has exited"):
        c.request(steps=5)


def test_the_probe_refuses_on_its_own(shm_dir):
    """A request written straight into the control block (no client-side checks): the probe
    itself caps the length and checks the disk floor."""
    env = dict(os.environ, TUIMON_CAPTURE_MIN_FREE_MB=str(10**9))
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, PLANTED, 2000, 0.02, 0.004),
                           stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert job.stdout.readline().strip() == "training"
        ctl, _view = open_control(seg_path(shm_dir, job.pid))
        ctl.write_request(1, L.CAPTURE_STEPS, steps=100_000)
        st = wait_for(lambda: (s := ctl.read_state()).ack_seq == 1 and s, what="an answer")
        assert st.name == "failed" and "steps must be 1..500" in st.message
        ctl.write_request(2, L.CAPTURE_STEPS, steps=5)
        st = wait_for(lambda: (s := ctl.read_state()).ack_seq == 2 and s, what="an answer")
        assert st.name == "failed" and "refused: less than" in st.message
    finally:
        job.kill()
        job.wait()


def test_a_window_in_seconds_for_a_loop_without_steps(shm_dir):
    job = subprocess.Popen([sys.executable, "-c", NO_STEPS], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "up"
        c = client_for(shm_dir, job.pid)
        seen = []
        st = c.wait(c.request(seconds=0.5), 60, on_change=lambda s: seen.append((s.state, s.message)))
        assert st.state == "done" and st.path.endswith(".pt.trace.json.gz") and os.path.getsize(st.path) > 0
        assert ("capturing", "capturing 0.5 s") in seen and st.last_step < st.first_step  # no steps covered
        # The window is opened off the training thread, yet it records the loop's own operators.
        ops = [r["name"] for r in trace_summary(st.path)["top_host_self"]]
        assert "aten::matmul" in ops and "aten::tanh" in ops, ops
    finally:
        job.kill()
        job.wait()


def test_a_window_of_steps_that_would_wait_for_good_is_refused_at_once(shm_dir, capture_dir):
    """Issue 43 item 22: on a loop without steps, --steps waited until --timeout (armed: opens at the
    next step) and a time window then waited 15 s for the steps past it that tell its cost: a
    window of steps is refused at once (exit 2) with --seconds suggested, and a time window that
    covered no step waits for no cost."""
    job = subprocess.Popen([sys.executable, "-c", NO_STEPS], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "up"
        p = subprocess.run(tuimon_cmd("capture", job.pid, "--wait", "--steps", 3, "--timeout", 5),
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout, p.stderr)
        assert p.stderr.startswith(f"tuimon: PID {job.pid} has counted no steps (its probe saw no optimizer.step()")
        assert "--seconds 10 takes a time window" in p.stderr and len(p.stderr.splitlines()) == 1
        p = subprocess.run(tuimon_cmd("capture", job.pid, "--wait", "--seconds", 0.5), capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        assert "  cost: not known (the window covered no step: a window's cost is read from the job's step times)" \
            in p.stdout.splitlines(), p.stdout
    finally:
        job.kill()
        job.wait()


def test_a_window_of_steps_of_a_stalled_loop_is_refused_at_once(shm_dir, capture_dir, sleeper):
    """...and on a loop whose last step ended past the stall bar (107 s ago; steps of 0.1 s)."""
    from tests.test_baseline_cli import _hung_job

    w = _hung_job(shm_dir, sleeper.pid, 107)
    for args in ((), ("--steps", 3)):  # (the default there is 10 steps: the loop has counted steps)
        p = subprocess.run(tuimon_cmd("capture", sleeper.pid, "--wait", "--timeout", 3, *args), capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout, p.stderr)
        assert re.match(rf"tuimon: PID {sleeper.pid} has made no step for 1\d\d s \(the stall bar: 20 s\): a window "
                        r"of \d+ steps opens at its next step and would wait for it; --seconds 10 takes a time window$",
                        p.stderr), p.stderr
    w.unlink()


def test_capture_refusals_from_the_cli(shm_dir):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        p = subprocess.run(tuimon_cmd("capture", sleeper.pid), capture_output=True, text=True)
        assert p.returncode == 2 and "has no tuimon channel" in p.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
    p = subprocess.run(tuimon_cmd("capture", 4194304), capture_output=True, text=True)
    assert p.returncode == 2 and "no process with PID 4194304" in p.stderr


def test_control_block_round_trip_and_untrusted_text():
    ctl = ControlBlock(MappedView(bytearray(L.CONTROL_SIZE)))
    ctl.write_request(7, L.CAPTURE_SECONDS, seconds=2.5)
    assert ctl.read_request().seq == 7 and ctl.read_request().seconds == 2.5
    ctl.write_state(7, L.STATE_FAILED, 3, 4, 2, 99, message="bad \x1b[31m" + "x" * 1000, path="/p")
    st = ctl.read_state()
    # the text stays what the probe wrote (bounded); a terminal only ever sees it made safe
    assert st.message.startswith("bad \x1b[31m") and len(st.message) == 256 and st.path == "/p"
    from tuimon.cli.capture import progress_line
    from tuimon.model import CaptureStatus

    line = progress_line(CaptureStatus(seq=7, state="failed", kind="torch.profiler", first_step=3,
                                       last_step=4, message=st.message, path=st.path))
    assert line.startswith("failed: steps 3..4 bad \\x1b[31m") and "\x1b" not in line


def test_file_names():
    assert safe_file_part("../../etc/passwd; rm -rf /") == "etc_passwd_rm_-rf"
    assert "/" not in safe_file_part("a/b") and safe_file_part("") == "job"
    from tuimon.channel.paths import program_name

    assert program_name(["python3", "-m", "tuimon.workloads.demo_train", "--seconds", "240"]) == "demo_train"
    assert program_name(["/usr/bin/python", "/x/train.py", "--lr", "1"]) == "train.py"
    assert program_name(["torchrun", "--nproc", "8"]) == "torchrun"


def test_run_nsys_without_nsys_says_so(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    if os.path.exists("/opt/nvidia"):
        pytest.skip("this machine has NVIDIA tools")
    p = subprocess.run(tuimon_cmd("run", "--nsys", "--", "true"), capture_output=True, text=True)
    assert p.returncode == 2 and "Nsight Systems (nsys) not found" in p.stderr


ENDS_ON_CUE = str(ROOT / "tests" / "workloads" / "ends_on_cue.py")


@pytest.mark.parametrize("mode,end,code", [("steps", "exit 3", 3), ("seconds", "raise", 1), ("steps", "SIGINT", -2)])
def test_a_job_that_ends_inside_a_window_keeps_its_exit_code(shm_dir, capture_dir, tmp_path, mode, end, code):
    """torch crashes at interpreter shutdown with its profiler still on (SIGSEGV, 139): the probe
    closes the window at exit, writes what it holds, and says the job ended inside it."""
    cue = tmp_path / "cue"
    how = ["exit", "0"] if end == "SIGINT" else end.split()
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, ENDS_ON_CUE, cue, *how, "steps"),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "training"
        c = client_for(shm_dir, job.pid)
        seq = c.request(steps=500) if mode == "steps" else c.request(seconds=300)
        # a few steps into the window (500 steps of >= 20 ms each: it cannot end by itself first)
        first = wait_for(lambda: (s := c.status()).seq == seq and s.state == "capturing" and s.first_step, 60,
                         "an open window")
        with SegmentReader(seg_path(shm_dir, job.pid)) as r:
            wait_for(lambda: r.steps >= first + 2, 60, "steps in the window")
        if end == "SIGINT":
            job.send_signal(signal.SIGINT)
        else:
            cue.touch()
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == code, err[-2000:]
    st = c.status()
    assert st.seq == seq and st.state == "done", st
    assert st.message.startswith(f"the job ended inside the window at step {st.last_step} (asked: "), st.message
    assert st.last_step >= st.first_step + 2 and "stopped in" in st.message and "at exit" in st.message
    with gzip.open(st.path) as f:  # written whole
        names = {e.get("name") for e in json.load(f)["traceEvents"]}
    assert "aten::linear" in names or "aten::addmm" in names


def test_a_job_that_ends_before_its_window_opens_says_so(shm_dir, capture_dir, tmp_path):
    """A window of steps in a loop that makes none stays armed; the job's end is its answer."""
    cue = tmp_path / "cue"
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, ENDS_ON_CUE, cue, "raise", "nosteps"),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "training"
        c = client_for(shm_dir, job.pid)
        seq = c.request(steps=5)
        wait_for(lambda: (s := c.status()).seq == seq and s.state == "armed", 60, "an armed window")
        cue.touch()
        job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 1
    st = c.status()
    assert (st.seq, st.state, st.message) == (seq, "failed", "the job ended at step 0, before the window opened")


EXITS_WHILE_WRITING = """
import os, sys, torch, tuimon
tuimon.instrument()
from tuimon.capture.client import CaptureClient
from tuimon.channel import SegmentReader
r = SegmentReader(tuimon.status().path)
c = CaptureClient(r.path, r.info.pid, r.info.start_ticks)
seq = c.request(steps=3)
net = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
while c.status().state not in ("writing", "done"):
    x = torch.randn(16, 64)
    for _ in range(400):  # (many operators: a trace that takes a while to write)
        x = net(x).tanh()
    x.sum().backward()
    opt.step()
    opt.zero_grad()
print(seq, os.getpid(), flush=True)
sys.exit(5)
"""


def test_a_job_that_ends_while_its_trace_is_written_waits_for_it(shm_dir, capture_dir):
    """The export runs on a daemon thread, which interpreter shutdown would cut off mid-file: the
    exit waits for it."""
    job = subprocess.run([sys.executable, "-c", EXITS_WHILE_WRITING], capture_output=True, text=True, timeout=120)
    assert job.returncode == 5, job.stderr
    seq, pid = map(int, job.stdout.split())
    st = client_for(shm_dir, pid).status()
    assert (st.seq, st.state) == (seq, "done") and st.last_step - st.first_step + 1 == 3, st
    with gzip.open(st.path) as f:
        assert json.load(f)["traceEvents"]

NO_OPTIMIZER = """
import os, sys, time, torch, tuimon
tuimon.instrument()
print("up", flush=True)
x = torch.randn(64, 64)
while not os.path.exists(sys.argv[1]):
    with tuimon.range("matmul"):
        x = (x @ x).tanh()
    tuimon.step()
    time.sleep(0.002)
print("torch._inductor imported" if "torch._inductor" in sys.modules else "torch._inductor not imported", flush=True)
"""


def test_a_window_imports_nothing_into_the_job_and_stops_off_its_loop(shm_dir, tmp_path):
    """torch.profiler.profile imports torch._inductor at its first start (seconds of a job that
    has not imported it, holding the GIL): a window goes through torch.autograd.profiler instead;
    with a global profiler state (this torch), the window stops on tuimon's thread."""
    done = tmp_path / "done"
    job = subprocess.Popen([sys.executable, "-c", NO_OPTIMIZER, str(done)], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "up"
        c = client_for(shm_dir, job.pid)
        st = c.wait(c.request(steps=3), 60)
        assert st.state == "done" and "on tuimon's thread" in st.message, st.message
        assert "aten::matmul" in [r["name"] for r in trace_summary(st.path)["top_host_self"]]  # (the loop's, recorded)
        done.touch()
        assert job.stdout.readline().strip() == "torch._inductor not imported"
    finally:
        job.kill()
        job.wait()


def test_a_request_while_the_last_window_is_written_waits_for_it(shm_dir):
    """The next window cannot open while the last one's profiler is being stopped (one Kineto
    session per process): the probe takes the request once the last window is done."""
    job = start_job(PLANTED, 3000, 0.02, 0.004)
    try:
        ctl, _view = open_control(seg_path(shm_dir, job.pid))
        ctl.write_request(1, L.CAPTURE_STEPS, steps=3)
        wait_for(lambda: (s := ctl.read_state()).ack_seq == 1 and s.name == "writing", 60, "the window to end")
        ctl.write_request(2, L.CAPTURE_STEPS, steps=3)  # (as a second monitor could, past the client's check)
        st = wait_for(lambda: (s := ctl.read_state()).ack_seq == 2 and s.name in ("done", "failed") and s, 60,
                      "the second window")
        assert st.name == "done", st.message
    finally:
        job.kill()
        job.wait()


COUNTED_EVERY_STEP = """
import time, torch, tuimon
from tuimon.probe import ops
ops.FIRST, ops.EVERY_MIN, ops.EVERY_MAX = 2, 1, 1  # (every step's ops counted: a window always meets a count)
tuimon.instrument()
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.01)
x, y = torch.randn(16, 32), torch.randn(16, 1)
print("up", flush=True)
end = time.time() + 90
while time.time() < end:
    loss = torch.nn.functional.mse_loss(net(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.005)
"""


@pytest.mark.parametrize("window", [{"steps": 5}, {"seconds": 0.5}])
def test_the_op_counter_is_not_in_a_window(shm_dir, window):
    """Issue 43 item 18: the probe's op counter (a TorchDispatchMode) was the top host operator of a
    torch.profiler window's summary, tuimon's instrumentation inside the user's profile. No step is
    counted while a window is asked for, open or written: a job that counts every step's ops has
    none of the counter in its window."""
    job = subprocess.Popen([sys.executable, "-c", COUNTED_EVERY_STEP], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "up"
        r = SegmentReader(seg_path(shm_dir, job.pid))
        wait_for(lambda: r.steps >= 10, 60, "10 steps")
        c = client_for(shm_dir, job.pid)
        st = c.wait(c.request(**window), 60)
        assert st.state == "done", st.message
        rows = trace_summary(st.path)["top_host_self"]
        names = [row["name"] for row in rows]
        assert not [n for n in names if "Dispatch" in n or "Count" in n], rows
        with gzip.open(st.path) as f:
            events = json.load(f)["traceEvents"]
        # the job's own ops are in the trace (a 0.5 s window on a loaded machine can hold more backward
        # than forward: its top five host operators need not name the forward's)
        assert {"aten::addmm", "aten::linear"} & {e.get("name") for e in events}, names
        assert not [e for e in events if "PythonDispatchMode" in str(e.get("name"))]
    finally:
        job.kill()
        job.wait()


def test_a_window_writes_nothing_into_the_jobs_output(shm_dir, capture_dir):
    """Issue 43 item 23: Kineto wrote `USDT: ... profiler_start` and `profiler_stop` into the job's
    stderr at every torch.profiler window (its default level, ERROR, is below its USDT lines). A job
    tuimon starts gets Kineto's log level above all of them (KINETO_LOG_LEVEL, where the job has not
    set it): its windows leave its output as it was."""
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, PLANTED, 3000, 0.02, 0.004),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "training"
        c = client_for(shm_dir, job.pid)
        for _ in range(2):
            st = c.wait(c.request(steps=3), 60)
            assert st.state == "done", st.message
    finally:
        job.kill()
        _out, err = job.communicate(timeout=60)
    assert not [line for line in err.splitlines() if "profiler_st" in line or "USDT" in line or "tuimon" in line], err
