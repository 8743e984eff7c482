import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
HELPERS = Path(__file__).resolve().parent / "helpers"

# A suite started in the background of a script (`cmd &` in a non-interactive shell) inherits SIGINT
# ignored, and so would every process it starts: the tests that press Ctrl-C would wait for an end
# that never comes. A handler here is not inherited through exec: the processes get the default again.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def shm_dir(tmp_path, monkeypatch):
    """Each test gets its own segment folder (inherited by the processes it starts)."""
    d = tmp_path / "shm"
    d.mkdir()
    monkeypatch.setenv("TUIMON_SHM_DIR", str(d))
    return d


@pytest.fixture(autouse=True)
def kineto_off(monkeypatch):
    """Jobs that `tuimon run` starts in the tests are not in Kineto's daemon mode, and `tuimon
    capture` takes the probe's windows, as the tests were written for; tests of Kineto's path
    (test_kineto_daemon.py) set TUIMON_KINETO=1 themselves."""
    monkeypatch.setenv("TUIMON_KINETO", "0")


def python(script: str, *args, env=None, **kw) -> subprocess.Popen:
    """Start a Python process running `script` (source text)."""
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], env=env, **kw)


def run_python(script: str, *args, timeout=120, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.fixture
def sleeper():
    """A plain process with no probe and no channel."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield p
    p.kill()
    p.wait()


def wait_for(pred, timeout=30.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def wait_or_say_where(proc, timeout: float, what: str):
    """proc.wait(timeout); past it, py-spy's dump of where every thread of proc is goes into the failure
    (a stuck exit is found from its stacks, not guessed at), and proc and its children are killed."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired as e:
        exe = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
        try:
            dump = subprocess.run([exe, "dump", "--pid", str(proc.pid), "--nonblocking"], capture_output=True,
                                  text=True, timeout=30)
            stacks = dump.stdout + dump.stderr
        except (OSError, subprocess.TimeoutExpired) as why:
            stacks = f"(no py-spy dump: {why})"
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(proc.pid).children(recursive=True):  # (a job in a session of its own too)
                child.kill()
        proc.kill()
        proc.wait()
        raise AssertionError(f"{what}: still running after {timeout:g} s; its threads then:\n{stacks}") from e


# A job with the probe that steps every ~10 ms for two minutes and says "up" once instrumented
STEPPING_JOB = """
import time, tuimon
tuimon.instrument()
print("up", flush=True)
end = time.monotonic() + 120
while time.monotonic() < end:
    time.sleep(0.01)
    tuimon.step()
"""


def tuimon_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "tuimon", *map(str, args)]


def seg_path(shm: Path, pid: int) -> str:
    return str(shm / f"tuimon-{os.getuid()}-{pid}")
