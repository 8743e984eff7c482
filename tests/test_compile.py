"""A torch.compile'd model under the probe runs the same compiled graphs as without it: no graph
break added, the same number of graphs and captured calls, no warning added to its output, and
its forward phase still measured (at the compiled module's boundary)."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.compiled_output import counters, others
from tests.conftest import ROOT, tuimon_cmd

COMPILED = str(ROOT / "tests" / "workloads" / "compiled.py")


def run(env, under_tuimon):
    """(the job's own output, tuimon's lines) of one run, with or without tuimon (which sends the
    job's output to a log of its own)."""
    cmd = [sys.executable, COMPILED]
    if under_tuimon:
        cmd = tuimon_cmd("run", "--plain", "--interval", "0.3", "--", *cmd)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    if not under_tuimon:
        return r.stdout + r.stderr, ""
    log = re.search(r"its output goes to (\S+)\n", r.stderr).group(1)
    with open(log) as f:
        return f.read(), r.stdout


@pytest.mark.parametrize("backend, how, optimizer", [("eager", "wrap", ""), ("eager", "inplace", ""),
                                                     ("inductor", "wrap", ""), ("eager", "wrap", "compiled")])
def test_a_compiled_model_runs_the_same_graphs_under_the_probe(shm_dir, backend, how, optimizer):
    """optimizer=compiled: the optimizer's step compiled too, through tuimon's wrapper of its class's step."""
    if backend == "inductor" and not (shutil.which("gcc") or shutil.which("cc")):
        pytest.skip("inductor needs a C++ compiler on the CPU")
    env = {**os.environ, "BACKEND": backend, "HOW": how, "OPTIMIZER": optimizer}
    (plain, _), (probed, lines) = run(env, False), run(env, True)
    assert counters(plain).startswith("graph_breaks "), plain  # (the job printed its counters)
    assert counters(probed) == counters(plain), (counters(plain), counters(probed))
    if not optimizer:  # (torch's optimizer step breaks its graph on purpose: its count is the same with tuimon)
        assert counters(plain).startswith("graph_breaks 0 ")
    assert others(probed) == others(plain)  # no warning added to the job's output
    last = [x for x in lines.splitlines() if x.startswith("pid ") and "phases" in x][-1]
    assert "forward" in last.split("phases", 1)[1], last  # measured at the compiled module's boundary
