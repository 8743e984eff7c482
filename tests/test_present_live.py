"""The present moment on real loops (tests/workloads/present.py, each writing its own truth): a
DataLoader blocked for good, a worker killed, a rank sleeping before its all_reduce, 3 s steps, a
hand-written SGD loop, gradient accumulation, a job raising after 10 steps, a checkpoint pause.

The loops that wait a long time are started together once (module fixture) and mostly sleep, so the
waits overlap."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import ROOT, tuimon_cmd, wait_for
from tuimon.analysis import thresholds as T
from tuimon.monitor.session import LiveSession

PRESENT = str(ROOT / "tests" / "workloads" / "present.py")


class Job:
    """A workload under `tuimon run --headless` (it keeps the PID), with its own segment folder."""

    def __init__(self, folder, kind, *args, launcher=(), stdin=None):
        self.folder, self.kind = folder, kind
        os.makedirs(folder, exist_ok=True)
        self.env = {**os.environ, "TUIMON_SHM_DIR": str(folder)}
        self.truth_path = os.path.join(folder, "truth.json")
        self.out = open(os.path.join(folder, "job.out"), "w")
        cmd = [*launcher, PRESENT] if launcher else [sys.executable, PRESENT]
        self.proc = subprocess.Popen(tuimon_cmd("run", "--headless", "--", *cmd, kind, "--truth", self.truth_path,
                                                *map(str, args)), env=self.env, stdout=self.out,
                                     stderr=subprocess.STDOUT, stdin=stdin)
        self.pid = self.proc.pid

    def truth(self, rank=None):
        path = self.truth_path if rank is None else f"{self.truth_path}.{rank}"
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def once(self, window=0.5):
        """`tuimon attach PID --once --json`, as a script reads it."""
        r = subprocess.run(tuimon_cmd("attach", self.pid, "--once", "--json", "--window", window), env=self.env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    def output(self):
        with open(os.path.join(self.folder, "job.out")) as f:
            return f.read()

    def stop(self):
        for p in [*psutil.Process(self.pid).children(recursive=True), psutil.Process(self.pid)] \
                if psutil.pid_exists(self.pid) else []:
            try:
                p.kill()
            except psutil.Error:
                pass
        self.proc.wait(timeout=30)
        self.out.close()


@pytest.fixture(scope="module")
def waiting_jobs(tmp_path_factory):
    """The loops whose test waits for a long quiet: started together, stopped together."""
    base = tmp_path_factory.mktemp("present")
    jobs = {"data-stuck": Job(base / "data", "data-stuck", "--steps", 8),
            "ddp-hang": Job(base / "ddp", "ddp-hang", "--steps", 15,
                            launcher=(sys.executable, "-m", "torch.distributed.run", "--standalone",
                                      "--nproc-per-node", "2"))}
    yield jobs
    for job in jobs.values():
        job.stop()


def test_a_dataloader_blocked_for_good_is_stalled_within_30_s_in_data(waiting_jobs):
    job = waiting_jobs["data-stuck"]
    wait_for(lambda: (t := job.truth()) and t["steps"] >= 8 and t["phase"] == "data", timeout=60,
             what="the loop's 8 steps, then its blocked read")
    blocked_at = job.truth()["phase_t0"]  # (time.monotonic(): the clock tuimon uses too)
    healthy = job.once()
    assert healthy["verdict"]["code"] != "stalled" or time.monotonic() - blocked_at > T.STALL_FLOOR.value
    doc = wait_for(lambda: (d := job.once())["verdict"]["code"] == "stalled" and d, timeout=60,
                   what="STALLED")
    named_after = time.monotonic() - blocked_at
    print(f"STALLED {named_after:.1f} s after the read blocked: {doc['verdict']['evidence']}")
    assert named_after <= 30 + 5  # (+ the last attach's own time)
    assert doc["verdict"]["headline"] == "stalled: waiting for data"
    assert doc["now"]["phase"] == "data" and doc["now"]["step"] == job.truth()["steps"] + 1
    assert doc["steps"] == 8 and doc["since_step_s"] > T.STALL_FLOOR.value
    assert "present.py" in doc["now"]["where"] and "in train_with_optimizer" in doc["now"]["where"]
    assert "workers 2 of 2 alive" in doc["verdict"]["evidence"]
    assert "idle" in doc["verdict"]["next_step"]
    # every thread's stack, as py-spy dump prints them, the loop's first
    doc = wait_for(lambda: (d := job.once()).get("stacks") and d, timeout=30, what="the threads' stacks")
    first = doc["stacks"].split("\n\n")[1]
    assert '"MainThread" [the training loop]' in first and "torch/utils/data/dataloader.py:" in first


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_stalled_loop_in_a_real_terminal(waiting_jobs):
    """The screen says it, with what the loop does now; t shows every thread's stack."""
    from tests.test_tmux import Tmux

    job = waiting_jobs["data-stuck"]
    wait_for(lambda: (t := job.truth()) and t["phase"] == "data" and t["steps"] >= 8, timeout=60, what="the stall")
    t = Tmux(f"env TUIMON_SHM_DIR={job.folder} " + " ".join(tuimon_cmd("attach", job.pid, "--interval", "0.5")))
    try:
        screen = wait_for(lambda: (s := t.screen()) and "STALLED: WAITING FOR DATA" in s and s, timeout=60,
                          what="STALLED on screen")
        assert re.search(r"now step 9: data for [\d.]+ (s|min)", screen), screen
        assert "no step for" in screen.splitlines()[0]  # (the header: not the steps/s of the 8 steps before)
        t.keys("t")
        screen = wait_for(lambda: (s := t.screen()) and "[the training loop]" in s and s, timeout=30,
                          what="the threads' stacks")
        assert "dataloader.py" in screen
        t.keys("Escape")
        wait_for(lambda: "STALLED" in t.screen(), timeout=10, what="the main screen again")
        t.keys("q")
        wait_for(lambda: not t.alive(), timeout=15, what="quit")
        assert psutil.pid_exists(job.pid)  # (quitting the monitor never touches an attached job)
    finally:
        t.kill()


def test_a_rank_sleeping_before_its_all_reduce_is_named_and_the_other_waits_in_it(waiting_jobs):
    job = waiting_jobs["ddp-hang"]
    wait_for(lambda: (t := job.truth(1)) and t["stuck"], timeout=90, what="rank 1 to stop before its all_reduce")
    stuck_at = job.truth(1)["stuck"]["at"]
    doc = wait_for(lambda: (d := job.once(1.0))["verdict"]["code"] == "stalled" and d, timeout=90, what="STALLED")
    print(f"STALLED {time.monotonic() - stuck_at:.1f} s after rank 1 stopped: {doc['verdict']['headline']}; "
          f"{doc['verdict']['next_step']}")
    assert time.monotonic() - stuck_at <= 30 + 5  # (+ the last attach's own time)
    assert doc["verdict"]["headline"] == "stalled: rank 1 holds the others"
    assert doc["verdict"]["next_step"].startswith("rank 1 never entered the collective rank 0 waits in (all_reduce): "
                                                  "it is in other"), doc["verdict"]["next_step"]
    ranks = {r["rank"]: r for r in doc["ranks"]}
    assert ranks[0]["stalled"] and ranks[0]["now"]["phase"] == "comm" and "all_reduce" in ranks[0]["now"]["waiting_in"]
    assert ranks[1]["now"]["phase"] == "other" and "present.py" in ranks[1]["now"]["where"]


def test_a_loop_blocked_before_its_first_step_is_stalled_at_its_line_and_one_computing_is_not(tmp_path):
    """Issue 43 item 17: a loop blocked on a lock before its first step read 'not enough data yet' for
    good. Past the stall bar's floor with its thread idle it is stalled, at the line it waits on; a
    loop computing as long before its first step (a dataset made in Python) is not."""
    lock, busy = Job(tmp_path / "lock", "lock-first"), Job(tmp_path / "busy", "busy-first", "--every", 600)
    try:
        wait_for(lambda: (t := lock.truth()) and t["stuck"], timeout=60, what="the lock")
        busy_from = wait_for(lambda: (t := busy.truth()) and t.get("busy_from"), timeout=60, what="the work")
        doc = wait_for(lambda: (d := lock.once(window=1))["verdict"]["code"] == "stalled" and d, timeout=120,
                       what="STALLED before the first step")
        v = doc["verdict"]
        print(f"STALLED: {v['headline']} · {v['evidence']}")
        assert doc["steps"] == 0 and v["headline"].startswith("stalled: blocked before its first step at ")
        assert "present.py:" in v["headline"] and v["headline"].endswith(" in before_first_step"), v["headline"]
        assert "no step yet, blocked for" in v["evidence"] and "a lock, input(), a sleep" in v["next_step"]
        wait_for(lambda: time.monotonic() - busy_from > T.STALL_FLOOR.value + 2, timeout=60, what="the floor")
        doc = busy.once(window=1)
        assert doc["steps"] == 0 and doc["verdict"]["code"] == "waiting", doc["verdict"]  # (work, not a stall)
    finally:
        lock.stop()
        busy.stop()


def test_a_loop_asleep_or_in_input_before_its_first_step_is_stalled_at_its_line(tmp_path):
    """Issue 43 item 17, the sleep and input() of it (the lock is above): stalled at the line within
    the bar a DataLoader wait gets (30 s), not 'not enough data yet' for good."""
    jobs = [Job(tmp_path / "sleep", "sleep-first"), Job(tmp_path / "input", "input-first", stdin=subprocess.PIPE)]
    try:
        for job in jobs:
            wait_for(lambda j=job: (t := j.truth()) and t["stuck"], timeout=60, what=f"{job.kind} blocked")
        for job in jobs:
            at = job.truth()["stuck"]["at"]
            doc = wait_for(lambda j=job: (d := j.once(window=1))["verdict"]["code"] == "stalled" and d, timeout=120,
                           what=f"{job.kind} STALLED")
            v, named_after = doc["verdict"], time.monotonic() - at
            print(f"{job.kind}: STALLED {named_after:.1f} s after it blocked: {v['headline']} · {v['evidence']}")
            assert named_after <= 30 + 5  # (+ the last attach's own time)
            assert doc["steps"] == 0 and v["headline"].startswith("stalled: blocked before its first step at ")
            assert "present.py:" in v["headline"] and v["headline"].endswith(" in before_first_step"), v["headline"]
    finally:
        for job in jobs:
            job.stop()


def test_the_step_in_progress_of_a_loop_of_3_s_steps(shm_dir):
    """Read (in this process, to compare at one moment) beside the loop's own truth: the same step
    number and phase, its time in the phase within 0.5 s of the loop's own (the probe says it every
    0.2 s)."""
    job = Job(shm_dir, "slow")
    session = LiveSession(job.pid, 0.5)
    try:
        wait_for(lambda: (t := job.truth()) and t["steps"] >= 2, timeout=60, what="two 3 s steps")
        seen = []
        end = time.monotonic() + 9
        while time.monotonic() < end:
            before = job.truth()
            time.sleep(0.3)  # (the probe's word is up to 0.2 s old: the loop must not have moved in that time)
            t = session.poll().training
            after = job.truth()
            if t is None or t.now is None or before != after:
                continue  # the loop moved on while tuimon looked: not comparable
            own_s = time.monotonic() - after["phase_t0"]
            seen.append((t.now.step, t.now.phase, round(t.now.phase_s, 2), after["steps"] + 1, after["phase"],
                         round(own_s, 2)))
            assert (t.now.step, t.now.phase) == (after["steps"] + 1, after["phase"]), seen[-1]
            assert abs(t.now.phase_s - own_s) <= 0.5, seen[-1]
            assert t.now.step_s >= t.now.phase_s
        print("step in progress (tuimon: step, phase, s; the loop's own: step, phase, s):", seen)
        assert len(seen) >= 8 and {p for _, p, *_ in seen} >= {"data", "forward", "backward"}, seen
        assert t.step_time_ms.p50 == pytest.approx(3000, rel=0.1)
    finally:
        session.stop()
        job.stop()


@pytest.mark.parametrize("kind, source, weak", [("manual", "backward", 0), ("accumulate", "optimizer", 0)])
def test_steps_of_a_loop_with_no_optimizer_and_of_gradient_accumulation(tmp_path, kind, source, weak):
    """A hand-written SGD loop gets its steps from backward(); one that accumulates 4 backwards per
    optimizer step still counts the optimizer's steps. weak: the steps a weaker source counted before
    the optimizer's first step said it counts them, still in the count (the accumulating loop's first
    three backward() calls were, until issue 43 item 14: the probe's step.uncounted leaves them out)."""
    job = Job(tmp_path, kind, "--steps", 300)
    try:
        wait_for(lambda: (t := job.truth()) and t["steps"] >= 150, timeout=120, what="150 steps")
        before = job.truth()["steps"]
        doc = job.once(0.2)
        after = job.truth()["steps"]  # (10 ms steps: the loop goes on while attach reads and exits)
        print(f"{kind}: tuimon {doc['steps']} steps, the loop's own {before}..{after} ({doc['step_source']})")
        assert doc["step_source"] == source
        assert before - 2 <= doc["steps"] - weak <= after + 2, (before, doc["steps"], after)  # live
        assert doc["phases"] and {p["name"] for p in doc["phases"]} >= {"data", "forward", "backward"}
        assert doc["verdict"]["code"] not in ("waiting", "stalled")
        job.proc.wait(timeout=120)
        doc = job.once(0.2)
        assert doc["steps"] - weak == job.truth()["steps"] and doc["verdict"]["code"] == "exited"  # (every step seen)
    finally:
        job.stop()


def test_a_job_raising_after_10_steps_is_exited_with_its_message(tmp_path):
    """Attached (the probe's last word) and under `tuimon run --plain` (its exit code and output)."""
    job = Job(tmp_path / "attached", "raise", "--steps", 10)
    job.proc.wait(timeout=120)
    doc = job.once(0.2)
    end = doc["job_end"]
    assert doc["verdict"]["code"] == "exited" and doc["steps"] == 10
    assert end["exception"] == "RuntimeError: planted failure after 10 steps"
    assert end["frames"][0].startswith("at tests/workloads/present.py:") or "present.py" in end["frames"][0]
    assert doc["verdict"]["headline"] == "exited (code 1): RuntimeError"  # (its exit code: issue 43 item 12)
    env = {**os.environ, "TUIMON_SHM_DIR": str(tmp_path)}
    r = subprocess.run(tuimon_cmd("run", "--plain", "--interval", "0.5", "--", sys.executable, PRESENT, "raise",
                                  "--steps", 10), env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    last = [line for line in r.stdout.splitlines() if line.startswith("pid ")][-1]
    assert "verdict: exited (code 1): RuntimeError" in last
    assert "exited with code 1: RuntimeError: planted failure after 10 steps" in last


def test_a_killed_dataloader_worker(tmp_path):
    """What torch does when a worker dies (the loader raises in the loop) is what tuimon says."""
    job = Job(tmp_path, "workers")
    try:
        wait_for(lambda: (t := job.truth()) and t["steps"] >= 20, timeout=60, what="20 steps")
        worker = next(p for p in psutil.Process(job.pid).children() if p.name() == "pt_data_worker")
        worker.send_signal(signal.SIGKILL)
        job.proc.wait(timeout=60)
        doc = job.once(0.2)
        assert doc["verdict"]["code"] == "exited", doc["verdict"]
        ended = doc["job_end"]["exception"]  # torch says it one of several ways: its watchdog or the fetch sees it
        # first, or the worker died handing over a batch, and the socket or pipe that carried it raised (seen here:
        # ConnectionResetError beside two CPU burners; EOFError, bare, on CI)
        assert f"DataLoader worker (pid(s) {worker.pid}) exited unexpectedly" in ended or \
            f"DataLoader worker (pid {worker.pid}) is killed by signal" in ended or \
            ended.split(":")[0] in ("ConnectionResetError", "EOFError", "BrokenPipeError", "ConnectionRefusedError"), \
            ended
        # what the job itself died of: its traceback's last line, or (once, beside two burners) only CPython's dump
        # of the exception ("object type name: ConnectionResetError ... lost sys.stderr")
        assert ended.split(":")[0] in job.output(), job.output()[-2000:]
        assert "DataLoader worker died" in doc["verdict"]["next_step"], doc["job_end"]
        assert "present.py" in doc["job_end"]["frames"][0]  # (the job's own line first, then torch's)
    finally:
        job.stop()


def test_a_checkpoint_pause_is_the_step_in_progress_not_a_stall(tmp_path):
    """10 s checkpoint writes every 8 s: during the first, "now: other" for seconds, never STALLED
    (under the 20 s floor); after it the loop's own bar rises to 5x its longest step."""
    job = Job(tmp_path, "checkpoint", "--every", 8)
    try:
        during, verdicts = [], set()
        end = time.monotonic() + 40
        while time.monotonic() < end:
            doc = job.once(0.2)
            verdicts.add(doc["verdict"]["code"])
            truth = job.truth() or {}
            if truth.get("phase") == "checkpoint" and doc.get("now"):
                during.append((doc["now"]["phase"], doc["now"]["phase_s"], doc["stall"]["limit_s"]))
        print("during the checkpoints (phase, s, bar):", during)
        assert "stalled" not in verdicts, verdicts
        assert any(p == "other" and s >= 3 for p, s, _ in during), during
        assert max(bar for _, _, bar in during) >= 49  # the loop's own history: 5 x its ~10 s step
    finally:
        job.stop()


def test_a_stopped_process_and_a_zombie(tmp_path):
    """SIGSTOP: stalled at once, said in words, and it clears on SIGCONT; an exited job its parent has
    not reaped (a zombie) is exited, never alive."""
    job = Job(tmp_path, "manual", "--steps", 100000)
    try:
        wait_for(lambda: (t := job.truth()) and t["steps"] >= 20, timeout=60, what="20 steps")
        os.kill(job.pid, signal.SIGSTOP)
        wait_for(lambda: psutil.Process(job.pid).status() == psutil.STATUS_STOPPED, timeout=10, what="stopped")
        doc = job.once(0.2)
        assert doc["verdict"]["headline"] == "stalled: the process is stopped", doc["verdict"]
        assert "kill -CONT" in doc["verdict"]["next_step"]
        os.kill(job.pid, signal.SIGCONT)
        doc = wait_for(lambda: (d := job.once(0.5))["verdict"]["code"] != "stalled" and d, timeout=30,
                       what="the stall to clear")
        os.kill(job.pid, signal.SIGTERM)  # (not reaped: it stays a zombie until job.stop())
        wait_for(lambda: psutil.Process(job.pid).status() == psutil.STATUS_ZOMBIE, timeout=30, what="a zombie")
        doc = job.once(0.2)
        assert doc["state"] == "exited" and doc["verdict"]["code"] == "exited", doc["verdict"]
    finally:
        job.stop()


def test_a_process_in_another_pid_namespace_is_said_in_words(tmp_path):
    """A job in a container: its PID here is not its PID there, where its probe named its channel."""
    p = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c",
                          "import time; time.sleep(60)"], stderr=subprocess.PIPE)
    try:
        inner = wait_for(lambda: [c for c in psutil.Process(p.pid).children() if "python" in c.name()] or
                         (p.poll() is not None and ["gone"]), timeout=10, what="the namespaced process")
        if inner == ["gone"]:
            pytest.skip(f"unshare --pid is not allowed here: {p.stderr.read().decode()[:200]}")
        r = subprocess.run(tuimon_cmd("attach", inner[0].pid, "--once"), capture_output=True, text=True, timeout=60)
        assert "runs in another PID namespace (a container), where it is PID 1" in r.stdout + r.stderr, r
    finally:
        p.kill()
        p.wait()
