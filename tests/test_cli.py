"""`tuimon run` and `tuimon attach` against real processes, and every bad input they can meet."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest

from tests.conftest import ROOT, seg_path, tuimon_cmd, wait_for, wait_or_say_where
from tuimon.channel import SegmentWriter, procinfo, ring
from tuimon.channel import layout as L

PLANTED = str(ROOT / "tests" / "workloads" / "planted_wait.py")
BATCH_DELAY, COMPUTE = 0.1, 0.015
EXPECTED_WAIT_SHARE = 1 - COMPUTE / (BATCH_DELAY / 2)  # 0.70, see planted_wait.py
TOLERANCE = 0.08


def attach_json(pid):
    p = subprocess.run(tuimon_cmd("attach", pid, "--once", "--json"), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def attach_error(pid):
    p = subprocess.run(tuimon_cmd("attach", pid, "--once", "--json"), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    return p.stderr


def attach_no_channel(pid):
    """A live process whose channel is missing or unusable: the monitor still answers (exit 0)
    with the process and GPU numbers, and says why there is no channel."""
    snap = attach_json(pid)
    assert snap["pid"] == pid and snap["state"] == "alive" and snap["process"]["pid"] == pid
    assert "steps" not in snap and isinstance(snap["gpus"], list)
    return snap["channel"]["na"]


def test_planted_data_wait_through_tuimon_run(shm_dir):
    """A real training loop (DataLoader, 2 workers) with no tuimon import, started through
    `tuimon run --headless`: attach --once --json sees its steps and the planted wait."""
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, PLANTED, 40, BATCH_DELAY, COMPUTE),
                           stdout=subprocess.PIPE, text=True)
    assert job.stdout.readline().strip() == "training"
    live = wait_for(lambda: (s := attach_json(job.pid))["steps"] >= 5 and s, what="steps")
    assert live["state"] == "alive" and live["pid"] == job.pid  # --headless keeps the job's PID
    assert job.wait(timeout=120) == 0
    snap = attach_json(job.pid)  # a last look at the finished job
    assert snap["state"] == "exited" and snap["closed"]
    assert snap["steps"] == 40 and snap["window_steps"] == 39  # the warm-up step is left out
    assert snap["dropped"] == 0 and snap["corrupt"] == 0
    assert abs(snap["data_wait_share"] - EXPECTED_WAIT_SHARE) <= TOLERANCE, snap["data_wait_share"]
    st = snap["step_time_ms"]
    # The two workers deliver batches in pairs (short step, long step): the mean is one batch
    # every BATCH_DELAY / 2.
    assert 45 <= st["mean"] <= 60 and st["p50"] <= st["p95"] <= st["p99"]
    assert snap["ranges"] == []  # no ranges in this loop: only steps and waits
    assert snap["argv"][-4:] == [PLANTED, "40", str(BATCH_DELAY), str(COMPUTE)]
    assert snap["probe_hot_path"] == ring.IMPLEMENTATION  # the job's probe says which one it runs


def test_run_shows_a_live_summary_and_cleans_up(shm_dir):
    p = subprocess.run(tuimon_cmd("run", "--plain", "--interval", "0.2", "--", PLANTED, 30, 0.04, 0.005),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert all(x.startswith("pid ") for x in lines), lines[:3]  # only the monitor's: the job writes to its log
    assert len(lines) >= 3 and "step 30 |" in lines[-1] and lines[-1].endswith("[process exited]")
    assert "data wait" in lines[-1] and "phases data" in lines[-1], lines[-1]
    assert "verdict: exited: finished" in lines[-1] and "while it ran: input-bound" in lines[-1], lines[-1]
    assert any("verdict: input-bound" in x for x in lines[:-1])  # (while it ran)
    assert p.stderr.splitlines()[-1] == "tuimon: the job exited with code 0"
    assert "no channel" not in p.stderr + p.stdout  # a job just started: "waiting for its channel"
    log = re.search(r"tuimon: started PID \d+; its output goes to (\S+)\n", p.stderr).group(1)
    assert f"tuimon: the job's output is in {log}\n" in p.stderr
    assert open(log).read().startswith("training")  # planted_wait.py's first line
    assert os.listdir(shm_dir) == []  # the job's segment went with it


def test_a_job_that_ended_is_not_told_to_go_on_while_another_thread_waits_for_it():
    """The monitor ends with the job; its process sampler may be inside the job's waitpid at that
    moment, when Popen.poll() answers None (CPython lets one thread wait at a time): the job ended
    all the same (beside two CPU burners, `run --plain` once said a finished job "goes on")."""
    import threading

    from tuimon.cli.run import _still_running

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.01)
    sampler_waiting = threading.Thread(target=lambda: (child._waitpid_lock.acquire(), time.sleep(0.2),
                                                       child._waitpid_lock.release()))
    sampler_waiting.start()
    time.sleep(0.05)
    assert child.poll() is None  # (what the monitor read before)
    assert _still_running(child) is False and child.returncode == 0
    sampler_waiting.join()


def test_run_plain_into_head_leaves_the_job_alone(tmp_path, shm_dir):
    """`| head -3` closes the monitor's stdout: the monitor stops and says so; the job never
    shared that pipe, so it prints on to its end (before, it died of BrokenPipeError)."""
    done = tmp_path / "done"
    job = ("import sys, time, tuimon\n"
           "for i in range(60): print('job line', i, flush=True); tuimon.step(); time.sleep(0.1)\n"
           f"open({str(done)!r}, 'w').close()\n")
    run = shlex.join(tuimon_cmd("run", "--plain", "--interval", "0.2", "--", sys.executable, "-c", job))
    p = subprocess.run(["bash", "-c", f"set -o pipefail; {run} | head -3"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr  # (pipefail: tuimon's own code)
    assert len(p.stdout.splitlines()) == 3 and all(x.startswith("pid ") for x in p.stdout.splitlines())
    assert "nothing reads the monitor's lines any more" in p.stderr and "goes on" in p.stderr
    assert "Traceback" not in p.stderr
    log = re.search(r"the job's output is in (\S+)\n", p.stderr).group(1)
    wait_for(done.exists, timeout=60, what="the job's own end")
    text = open(log).read()
    assert "job line 59" in text and "BrokenPipeError" not in text


def test_run_plain_names_its_log_in_ls_its_metrics_port_and_a_channel_that_never_comes(tmp_path, shm_dir):
    """The job's log is in `tuimon ls` as for the TUI; --metrics-port 0 says the port it got; a
    job with no Python gets no channel, said once after a wait (not 'start it with tuimon run')."""
    err = tmp_path / "err"
    with open(err, "w") as e:
        run = subprocess.Popen(tuimon_cmd("run", "--plain", "--interval", "0.5", "--metrics-port", 0, "--",
                                          "sleep", "60"), stdout=subprocess.DEVNULL, stderr=e)
    try:
        url = wait_for(lambda: re.search(r"tuimon: metrics on (http://127\.0\.0\.1:(\d+)/metrics)\n",
                                         err.read_text()), timeout=30, what="the metrics line")
        assert int(url.group(2)) > 0
        assert urllib.request.urlopen(url.group(1), timeout=10).status == 200
        said = wait_for(lambda: "no channel" in (t := err.read_text()) and t, timeout=60, what="the no-channel line")
        assert "tuimon: no channel from the job after 10 s: the probe starts with the job's Python processes" in said
        assert "start it with" not in said
    finally:
        run.send_signal(signal.SIGTERM)
        assert wait_or_say_where(run, 30, "tuimon run --plain after SIGTERM") == 128 + signal.SIGTERM  # (sleep's end)
    job = subprocess.Popen(tuimon_cmd("run", "--plain", "--interval", "0.5", "--", sys.executable, "-c",
                                      "import time, tuimon; [tuimon.step() or time.sleep(0.05) for _ in range(1200)]"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        log = re.search(r"its output goes to (\S+)", job.stderr.readline()).group(1)
        ls = wait_for(lambda: (o := subprocess.run(tuimon_cmd("ls"), capture_output=True, text=True,
                                                   timeout=60).stdout) and log in o and o, timeout=30, what="ls")
        assert "alive" in ls
    finally:
        job.send_signal(signal.SIGTERM)
        job.communicate(timeout=30)


def test_run_keeps_the_environments_own_sitecustomize(tmp_path, shm_dir):
    user = tmp_path / "usersite"
    user.mkdir()
    (user / "sitecustomize.py").write_text("print('user sitecustomize ran')\n")
    env = dict(os.environ, PYTHONPATH=str(user))
    code = "import os, tuimon; print('probe', tuimon.status().enabled)"
    p = subprocess.run(tuimon_cmd("run", "--headless", "--", sys.executable, "-c", code),
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    # (the tuimon command itself ran it once too: it has the same PYTHONPATH)
    assert p.stdout.splitlines()[-2:] == ["user sitecustomize ran", "probe True"]


def test_run_with_a_missing_command():
    p = subprocess.run(tuimon_cmd("run", "--", "/nonexistent/train"), capture_output=True, text=True)
    assert p.returncode == 127 and "cannot run /nonexistent/train" in p.stderr


def test_attach_unknown_pid():
    assert "no process with PID 4194304" in attach_error(4194304)


@pytest.fixture
def sleeper():
    p = subprocess.Popen(["sleep", "60"])
    yield p
    p.kill()
    p.wait()


def test_attach_a_process_without_a_channel(sleeper):
    why = attach_no_channel(sleeper.pid)
    assert f"PID {sleeper.pid} (sleep 60) has no tuimon channel" in why and "tuimon run" in why
    p = subprocess.run(tuimon_cmd("attach", sleeper.pid, "--once"), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith(f"pid {sleeper.pid} | no channel")


def test_attach_a_corrupt_segment(shm_dir, sleeper):
    with open(seg_path(shm_dir, sleeper.pid), "wb") as f:
        f.write(os.urandom(300_000))
    assert "not a tuimon channel segment" in attach_no_channel(sleeper.pid)
    # a channel that is there but unreadable is also a problem, reported as such
    assert "not a tuimon channel segment" in attach_json(sleeper.pid)["problems"]["channel"]


def test_plain_says_each_problem_once(shm_dir, sleeper):
    with open(seg_path(shm_dir, sleeper.pid), "wb") as f:
        f.write(b"\0" * 100)
    p = subprocess.Popen(tuimon_cmd("attach", sleeper.pid, "--plain", "--interval", "0.2"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    time.sleep(2.5)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    lines = [x for x in out.splitlines() if x.startswith(f"pid {sleeper.pid} | no channel")]
    assert len(lines) >= 5, out
    said = [x for x in err.splitlines() if x.startswith("tuimon: channel:")]
    assert len(said) == 1 and "is truncated (100 bytes" in said[0], err
    assert "Traceback" not in err


def _segment_for(shm_dir, pid, earlier_process=False):
    """A valid segment made here, then renamed and relabelled as process pid's (or as one left
    by an earlier process that had the same PID)."""
    w = SegmentWriter.create(None, 64)
    L.U32.pack_into(w._mm, 52, pid)
    L.U64.pack_into(w._mm, 56, procinfo.start_ticks(pid) - (1 if earlier_process else 0))
    os.rename(w.path, seg_path(shm_dir, pid))
    return seg_path(shm_dir, pid), w


def test_attach_a_segment_left_by_an_earlier_process_with_the_same_pid(shm_dir, sleeper):
    path, w = _segment_for(shm_dir, sleeper.pid, earlier_process=True)
    assert "earlier process that had the same PID" in attach_no_channel(sleeper.pid)


def test_attach_another_users_segment(shm_dir, sleeper):
    if os.getuid() != 0:
        pytest.skip("needs root to give a file away")
    path, w = _segment_for(shm_dir, sleeper.pid)
    os.chown(path, 65534, -1)
    assert "belongs to uid 65534" in attach_no_channel(sleeper.pid)


def test_attach_a_newer_layout(shm_dir, sleeper):
    path, w = _segment_for(shm_dir, sleeper.pid)
    L.U32.pack_into(w._mm, 8, 99)
    assert "newer tuimon (channel layout v99)" in attach_no_channel(sleeper.pid)


def test_attach_finds_the_channel_of_a_descendant(shm_dir):
    """Attaching to a launcher (a shell here, torchrun in life) finds its instrumented child."""
    code = "import time, tuimon; tuimon.instrument(); print('up', flush=True); time.sleep(60)"
    shell = subprocess.Popen(["sh", "-c", f'"{sys.executable}" -c "{code}"; true'], stdout=subprocess.PIPE, text=True)
    try:
        assert shell.stdout.readline().strip() == "up"
        snap = attach_json(shell.pid)
        child = psutil.Process(shell.pid).children()[0].pid
        assert snap["pid"] == child and snap["state"] == "alive"
        # it says which process it shows, and why
        assert snap["shown_why"].startswith(f"PID {shell.pid}: it has no channel; showing its descendant PID {child}")
    finally:
        subprocess.run(["pkill", "-P", str(shell.pid)])
        shell.wait()


LAUNCHER = """
import os, subprocess, sys, time, tuimon
tuimon.instrument()  # like torchrun under `tuimon run`: the launcher has a channel of its own
rank = "import os, time, tuimon; tuimon.instrument(); [tuimon.step() or time.sleep(0.01) for _ in range(6000)]"
ranks = [subprocess.Popen([sys.executable, "-c", rank], env=dict(os.environ, RANK=str(r), WORLD_SIZE="2"))
         for r in (1, 0)]
print("up", flush=True)
time.sleep(60)
"""


def test_attach_to_a_launcher_shows_its_rank_0(shm_dir):
    """The launcher's own channel has no steps and no rank: attach shows rank 0's."""
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, text=True)
    try:
        assert launcher.stdout.readline().strip() == "up"
        snap = wait_for(lambda: (s := attach_json(launcher.pid))["rank"] == 0 and s["steps"] > 0 and s,
                        what="rank 0's channel with steps")
        assert snap["world_size"] == 2 and snap["pid"] in [c.pid for c in psutil.Process(launcher.pid).children()]
    finally:
        for c in psutil.Process(launcher.pid).children():
            c.kill()
        launcher.kill()
        launcher.wait()


def test_record_a_cpu_job_without_a_gpu(tmp_path, shm_dir):
    """`tuimon record` on a real instrumented job: process and channel samples are recorded;
    with no NVML here it says so and records empty GPU samples rather than failing."""
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, PLANTED, 25, 0.04, 0.005),
                           stdout=subprocess.PIPE, text=True)
    assert job.stdout.readline().strip() == "training"
    out = tmp_path / "rec.jsonl"
    p = subprocess.run(tuimon_cmd("record", job.pid, "-o", out, "--interval", "0.2", "--note", "cpu"),
                       capture_output=True, text=True, timeout=120)
    job.wait()
    assert p.returncode == 0, p.stderr
    from tuimon.sources.recording import Recording

    rec = Recording(str(out))
    cycles = list(rec.cycles())
    training = [c.training for c in cycles if c.training]
    assert rec.header["note"] == "cpu" and rec.version == 2 and training and all(c.process for c in cycles)
    assert training[-1].steps == 25 and not cycles[-1].process.alive
    assert all(c.capture is not None and c.capture.state == "idle" for c in cycles if c.training)
    if "recording without GPU metrics" in p.stderr:
        assert all(c.gpus is None and "gpu" in c.problems for c in cycles)


def test_record_bad_targets_and_a_full_disk(tmp_path, sleeper):
    def record(pid, out, seconds=1):
        return subprocess.run(tuimon_cmd("record", pid, "-o", out, "--seconds", seconds, "--interval", "0.2"),
                              capture_output=True, text=True, timeout=60)

    p = record(4194304, tmp_path / "x.jsonl")
    assert p.returncode == 2 and "no process with PID 4194304" in p.stderr and not (tmp_path / "x.jsonl").exists()
    p = record(sleeper.pid, tmp_path / "no-such-dir" / "x.jsonl")
    assert p.returncode == 2 and "cannot write" in p.stderr and "No such file or directory" in p.stderr
    assert "Traceback" not in p.stderr
    if os.path.exists("/dev/full"):  # every write fails with ENOSPC: a full disk
        p = record(sleeper.pid, "/dev/full", 3)
        assert p.returncode == 1 and "recording stopped after" in p.stderr and "No space left" in p.stderr
        assert "Traceback" not in p.stderr


@pytest.mark.parametrize("bad", ["abc", "0.05", "nan", "inf"])
def test_a_bad_interval_is_refused_by_name(bad):
    p = subprocess.run(tuimon_cmd("attach", "1", "--interval", bad), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "argument --interval:" in p.stderr and "_interval" not in p.stderr
    assert "not a number of seconds" in p.stderr or "is out of range: 0.1 to 3600 seconds" in p.stderr


def test_replay_of_a_missing_file():
    p = subprocess.run(tuimon_cmd("replay", "/no/such/recording.jsonl"), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.strip() == \
        "tuimon: cannot read /no/such/recording.jsonl: No such file or directory"


def test_doctor_reports_and_never_crashes():
    p = subprocess.run(tuimon_cmd("doctor"), capture_output=True, text=True, timeout=60)
    assert p.returncode in (0, 1) and p.stderr == ""
    for what in ("NVML", "Nsight Systems", "channel folder", "other processes"):
        assert what in p.stdout
    if "[FAIL] NVML" in p.stdout:
        assert "fix:" in p.stdout
    pure = subprocess.run(tuimon_cmd("doctor"), capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TUIMON_PURE_PYTHON": "1"})
    assert "[warn] probe hot path   pure Python" in pure.stdout


def test_the_last_line_is_of_the_ended_job_when_it_ends_between_a_poll_and_the_check():
    """`run --plain` once printed a finished job's last line from a cycle polled while its
    interpreter was still tearing down (channel closed, process alive): the verdict without its
    ending. Here the job ends right after a cycle's poll, before follow() asks until()."""
    import io

    from tuimon.cli import textview
    from tuimon.monitor.session import LiveSession

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    session = LiveSession(child.pid, 0.05, popen=child)

    def ends_now() -> bool:
        if child.poll() is None:
            child.kill()
            child.wait()
        return True

    out = io.StringIO()
    view = textview.follow(session, 0.05, until=ends_now, out=out, launched=True)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "[process" not in lines[0], lines  # the cycle that read it alive, then the last look
    assert lines[-1].endswith("[process exited]") and "verdict: exited: killed by SIGKILL" in lines[-1], lines[-1]
    assert view.process is not None and not view.process.alive and view.job_end.exit_code == -9


WORKER_JOB = """
import os, time, tuimon, torch
tuimon.instrument()

class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        time.sleep(0.05)
        return torch.zeros(4)

def said(_):
    print("worker", os.getpid(), flush=True)

loader = torch.utils.data.DataLoader(Slow(), batch_size=1, num_workers=1, worker_init_fn=said)
end = time.time() + 60
for x in loader:
    if time.time() > end:
        break
"""


def test_attach_a_dataloader_worker_leads_to_its_loop(shm_dir):
    """Issue 43 item 20: a DataLoader worker has no channel of its own; attaching to it said "start it
    with tuimon run" of a job tuimon was watching. It leads to its parent, which runs the loop."""
    job = subprocess.Popen([sys.executable, "-c", WORKER_JOB], stdout=subprocess.PIPE, text=True)
    try:
        line = job.stdout.readline().split()
        assert line[0] == "worker", line
        worker = int(line[1])
        assert procinfo.parent(worker) == job.pid and not os.path.exists(seg_path(shm_dir, worker))
        snap = attach_json(worker)
        assert snap["pid"] == job.pid and snap["state"] == "alive", snap.get("channel")
        assert snap["shown_why"].startswith(f"PID {worker}: it has no channel (a DataLoader worker"), snap["shown_why"]
        assert f"showing its parent PID {job.pid}" in snap["shown_why"]
    finally:
        job.kill()
        job.wait()
