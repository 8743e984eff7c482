"""How a job ended when tuimon did not wait for it (issue 43 item 12): `run --headless` execs the job
(it keeps the PID), and `run`'s monitor may leave while the job goes on. sys.exit(3) read "exited:
finished ... nothing to fix"; SIGTERM and SIGSEGV read "killed ... tuimon did not start it". The job
says its exit code and a fatal signal itself as it ends (channel/_exitwatch.c): the C extension's
work, so these run with it."""

import json
import re
import subprocess
import sys

import pytest

from tests.conftest import tuimon_cmd
from tuimon.channel import ring

needs_c = pytest.mark.skipif(ring.IMPLEMENTATION != "c", reason=f"no C extension: {ring.C_UNAVAILABLE}")

ENDING = """
import ctypes, os, signal, sys, time
import tuimon
for _ in range(5):
    tuimon.step()
    time.sleep(0.01)
how = sys.argv[1]
if how == "exit":
    sys.exit(3)
if how == "SIGSEGV":
    ctypes.string_at(0)  # (a real fault: a read at address 0)
os.kill(os.getpid(), getattr(signal, how))
time.sleep(30)
"""


@needs_c
@pytest.mark.parametrize("how, code, headline, step", [
    ("exit", 3, "exited (code 3)", "its exit code says what the job meant"),
    ("SIGTERM", -15, "exited: killed by SIGTERM", "stopped from outside"),
    ("SIGSEGV", -11, "exited: killed by SIGSEGV", "a crash in native code"),
])
def test_a_job_run_headless_says_its_exit_code_and_the_signal_that_ended_it(shm_dir, how, code, headline, step):
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, "-c", ENDING, how),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, err = job.communicate(timeout=120)
    assert job.returncode == code, err  # (as without tuimon: the handler raises the signal again)
    r = subprocess.run(tuimon_cmd("attach", job.pid, "--once", "--json", "--window", 0.2), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    v, end = doc["verdict"], doc["job_end"]
    print(f"{how}: {v['headline']} · {v['evidence']} · {v['next_step']}")
    assert end["exit_code"] == code and doc["steps"] == 5
    assert v["code"] == "exited" and v["headline"] == headline
    assert step in v["next_step"] and "tuimon run" not in v["next_step"] and "nothing to fix" not in v["next_step"]


TEARDOWN = """
import time
import tuimon
for _ in range(150):
    time.sleep(0.02)  # (the loop waits: a sleep, no CPU)
    tuimon.step()
end = time.monotonic() + 2.0  # then 2 s at a full core after its last step, as an interpreter's teardown
while time.monotonic() < end:
    pass
"""


def test_while_it_ran_is_the_loops_window_not_the_teardown_after_its_last_step(shm_dir):
    """Issue 43 item 16: the 'while it ran' verdict came from the 2 s after the loop's last step (the
    loop thread busy in Python: 'Python outside the model' for a loop that slept); and the step in
    progress was said below the steps completed (now step 147 at step 150)."""
    p = subprocess.run(tuimon_cmd("run", "--plain", "--interval", 0.5, "--", sys.executable, "-c", TEARDOWN),
                       capture_output=True, text=True, timeout=180)
    lines = [x for x in p.stdout.splitlines() if x.startswith("pid ")]
    assert p.returncode == 0 and lines, p.stdout + p.stderr
    print("\n".join(x[x.find("verdict: "):][:160] for x in lines))
    assert any("verdict: host-bound: the loop waits elsewhere" in x for x in lines), p.stdout
    assert "verdict: exited: finished" in lines[-1]
    assert "while it ran: host-bound: the loop waits elsewhere" in lines[-1], lines[-1]
    for x in lines:  # (now: the step after the newest completed one, or later)
        done, now = re.search(r"\| step (\d+) \|", x), re.search(r"now step (\d+)", x)
        if done and now:
            assert int(now.group(1)) > int(done.group(1)), x
