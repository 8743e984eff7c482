"""Edges of the second sweep through the commands (issue 26): the first sample's verdict, baseline
save's refusals, Ctrl-C in capture --wait, a job that changes directory, baselines of another
program in text, addresses. Real commands, real processes."""

import subprocess
import sys

from tests.conftest import tuimon_cmd

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
    assert lines[-1].endswith("[process exited]") and verdict(lines[-1]) == verdict(lines[-2]), lines[-2:]
