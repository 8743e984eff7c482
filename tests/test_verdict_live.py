"""The verdict on the bundled demo workload, run on the CPU under the monitor (`tuimon run --plain`):
its model's compute holds most of the step on a loop thread near a full core, with no CUDA work:
CPU-bound, and a moderate data wait beside it never outranks that compute. The data wait is the
loop's own work of taking each batch in (tests/test_anatomy.py's intake loop), which a slower
machine stretches: on CI's it grew from 9% to 27% of the step for 20 s, and a wait of 20% or more
is input-bound (TensorBoard's 'highly input-bound'). So each line is judged by its own numbers."""

import re
import subprocess
import sys

from tests.conftest import tuimon_cmd
from tuimon.analysis import thresholds as T


def verdict(line: str) -> str:
    return line.split("verdict: ", 1)[1].split(" | ")[0]


def phases(line: str) -> dict[str, float]:
    """The line's 'phases data 9%, forward 40%, ...' as shares."""
    listed = line.split("phases ", 1)[1].split(" | ")[0]
    return {name: int(pct) / 100 for name, pct in re.findall(r"(\w+) (\d+)%", listed)}


def test_the_demo_on_the_cpu_is_cpu_bound(shm_dir):
    p = subprocess.run(tuimon_cmd("run", "--plain", "--interval", "2", "--", sys.executable, "-m",
                                  "tuimon.workloads.demo_train", "--device", "cpu", "--seconds", "40"),
                       capture_output=True, text=True, timeout=180)
    lines = [x for x in p.stdout.splitlines() if "verdict: " in x and "phases " in x and "data wait " in x]
    verdicts = [verdict(x) for x in lines]
    print("\n".join(verdicts))
    assert p.returncode == 0 and lines, p.stdout + p.stderr
    assert "CPU-bound: the model's compute" in verdicts, p.stdout
    for line, v in zip(lines, verdicts, strict=True):
        # the rule's own number (the line's 'data wait'), shown to a whole percent: 20% may be either side
        data = int(re.search(r"data wait (\d+)%", line)[1]) / 100
        parts = phases(line)
        model = sum(parts.get(k, 0.0) for k in ("forward", "backward", "optimizer"))
        if data < T.INPUT_HIGH.value:  # moderate at most, and only beside no model share 4x larger (rounding: 0.04)
            assert v != "input-bound" and (v != "input-bound (moderate)" or model < T.RANK_FACTOR.value * data + 0.04), line
        elif data > T.INPUT_HIGH.value and not v.startswith("exited"):  # (how it ended comes first)
            assert v == "input-bound", line
    line = next(x for x in lines if "verdict: CPU-bound" in x)
    assert "phases data" in line and "forward" in line and "backward" in line
