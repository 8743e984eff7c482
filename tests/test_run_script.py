"""`tuimon run -- ./train.py`: the script runs under the interpreter its `#!` line names, not
tuimon's (issue 43, item 9: tuimon in a venv of its own ran the job with its own Python and torch)."""

import os
import subprocess
import sys

import pytest

from tests.conftest import tuimon_cmd
from tuimon.cli.launch import command

SCRIPT = """
import sys
print("interpreter", sys.executable)
print("probe", "tuimon.probe" in sys.modules)
"""


@pytest.fixture(scope="module")
def other_python(tmp_path_factory):
    """A Python that is not tuimon's: a venv of its own, without tuimon (the probe comes by PYTHONPATH)."""
    venv = tmp_path_factory.mktemp("job-env") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return str(venv / "bin" / "python")


def script(folder, shebang, executable):
    path = folder / "train.py"
    path.write_text((f"#!{shebang}\n" if shebang else "") + SCRIPT)
    path.chmod(0o755 if executable else 0o644)
    return path


def ran(*argv, mode, cwd):
    """What the job printed ({'interpreter': ..., 'probe': ...}), run by `tuimon run`."""
    p = subprocess.run(tuimon_cmd("run", mode, "--", *argv), capture_output=True, text=True, timeout=120, cwd=cwd,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    if mode == "--plain":  # the job's output is in its log, named on stderr
        log = p.stderr.split("its output goes to ")[1].split()[0]
        with open(log) as f:
            out = f.read()
    return dict(line.split(" ", 1) for line in out.splitlines() if line.startswith(("interpreter ", "probe ")))


@pytest.mark.parametrize("mode", ["--headless", "--plain"])
def test_an_executable_script_runs_under_its_shebang(tmp_path, other_python, mode):
    path = script(tmp_path, other_python, executable=True)
    assert ran(path, mode=mode, cwd=tmp_path) == {"interpreter": other_python, "probe": "True"}
    assert ran("./train.py", mode=mode, cwd=tmp_path)["interpreter"] == other_python


def test_a_script_without_the_x_bit_runs_under_the_python_its_shebang_names(tmp_path, other_python):
    script(tmp_path, other_python, executable=False)
    assert ran("train.py", mode="--headless", cwd=tmp_path) == {"interpreter": other_python, "probe": "True"}


@pytest.mark.parametrize("shebang, executable", [(None, False), (None, True), ("/bin/sh", False)])
def test_a_script_with_no_python_to_run_it_runs_under_tuimons(tmp_path, shebang, executable):
    script(tmp_path, shebang, executable)
    assert ran("train.py", mode="--headless", cwd=tmp_path) == {"interpreter": sys.executable, "probe": "True"}


@pytest.mark.parametrize("shebang, runs", [
    ("/usr/bin/env python3", ["/usr/bin/env", "python3"]),
    ("/usr/bin/env -S python3.11 -u", ["/usr/bin/env", "-S python3.11 -u"]),
    ("/opt/venv/bin/python -u", ["/opt/venv/bin/python", "-u"]),
    ("/usr/bin/env bash", [sys.executable]),
    ("/opt/pythonista", [sys.executable]),
])
def test_which_interpreter_a_script_without_the_x_bit_gets(tmp_path, shebang, runs):
    path = script(tmp_path, shebang, executable=False)
    assert command([str(path), "--lr", "3e-4"]) == [*runs, str(path), "--lr", "3e-4"]
    os.chmod(path, 0o755)
    assert command([str(path), "--lr", "3e-4"]) == [str(path), "--lr", "3e-4"]
    assert command(["python", str(path)]) == ["python", str(path)]
