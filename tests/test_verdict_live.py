"""The verdict on the bundled demo workload, run on the CPU under the monitor (`tuimon run --plain`):
its model's compute holds most of the step on a loop thread near a full core, with no CUDA work:
CPU-bound, never the moderate data wait beside it."""

import subprocess
import sys

from tests.conftest import tuimon_cmd


def verdict(line: str) -> str:
    return line.split("verdict: ", 1)[1].split(" | ")[0]


def test_the_demo_on_the_cpu_is_cpu_bound(shm_dir):
    p = subprocess.run(tuimon_cmd("run", "--plain", "--interval", "2", "--", sys.executable, "-m",
                                  "tuimon.workloads.demo_train", "--device", "cpu", "--seconds", "40"),
                       capture_output=True, text=True, timeout=180)
    lines = [x for x in p.stdout.splitlines() if "verdict: " in x]
    verdicts = [verdict(x) for x in lines]
    print("\n".join(verdicts))
    assert p.returncode == 0 and lines, p.stdout + p.stderr
    assert "CPU-bound: the model's compute" in verdicts, p.stdout
    assert not any(v.startswith("input-bound") for v in verdicts), p.stdout  # (a 5-10% wait beside 85%+ of compute)
    line = next(x for x in lines if "verdict: CPU-bound" in x)
    assert "phases data" in line and "forward" in line and "backward" in line
