"""The real app in a real terminal: tmux runs `tuimon attach` against a real instrumented CPU
training process; send-keys types, capture-pane reads the screen."""

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from tests.conftest import ROOT, tuimon_cmd, wait_for

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
PLANTED = str(ROOT / "tests" / "workloads" / "planted_wait.py")


class Tmux:
    def __init__(self, command: str, size=(120, 40)):
        self.name = f"tuimon-test-{uuid.uuid4().hex[:8]}"
        # A server of its own (-L): the default one is shared with every other tmux user here, and
        # a session started as that server exits (its last session killed) fails ("server exited
        # unexpectedly").
        self.tmux = ["tmux", "-L", self.name]
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in os.environ.items()
                       if k.startswith(("TUIMON_", "PYTHON", "PATH", "HOME", "LANG", "LC_")))
        # Size the window first, then start the program in it: a program started with the session
        # can read the detached default (80x24) before the window takes its size.
        x, y = str(size[0]), str(size[1])
        for args in (["new-session", "-d", "-s", self.name, "-x", x, "-y", y, "sleep 600"],
                     ["set-option", "-t", self.name, "window-size", "manual"],
                     ["resize-window", "-t", self.name, "-x", x, "-y", y],
                     # COLUMNS/LINES (set in this test process, and copied into the tmux server's
                     # environment) would override the pty's size in Textual: drop them.
                     ["respawn-pane", "-k", "-t", self.name,
                      f"env -u COLUMNS -u LINES {env} TERM=xterm-256color {command}"]):
            subprocess.run([*self.tmux, *args], check=True, capture_output=True)

    def screen(self, escapes=False) -> str:
        """The visible screen; escapes=True keeps the SGR sequences (colours, bold)."""
        return subprocess.run([*self.tmux, "capture-pane", "-p", *(["-e"] if escapes else []), "-t", self.name],
                              capture_output=True, text=True).stdout

    def keys(self, *keys):
        subprocess.run([*self.tmux, "send-keys", "-t", self.name, *keys], check=True)

    def pane_pid(self) -> int:
        out = subprocess.run([*self.tmux, "display-message", "-p", "-t", self.name, "#{pane_pid}"],
                             capture_output=True, text=True).stdout
        return int(out.strip())

    def alive(self) -> bool:
        return subprocess.run([*self.tmux, "has-session", "-t", self.name], capture_output=True).returncode == 0

    def kill(self):
        subprocess.run([*self.tmux, "kill-session", "-t", self.name], capture_output=True)


def step_of(screen: str) -> int | None:
    m = re.search(r"step ([\d,]+)", screen)
    return int(m.group(1).replace(",", "")) if m else None


def test_attach_in_a_real_terminal_shows_steps_moving_and_the_planted_wait(shm_dir):
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, PLANTED, 400, 0.1, 0.015),
                           stdout=subprocess.PIPE, text=True)
    assert job.stdout.readline().strip() == "training"
    cmd = " ".join(shlex.quote(x) for x in tuimon_cmd("attach", job.pid, "--interval", "0.5"))
    t = Tmux(cmd)
    try:
        first = wait_for(lambda: step_of(t.screen()), timeout=30, what="a step count on screen")
        screen = wait_for(lambda: (s := t.screen()) and "INPUT-BOUND" in s and s, timeout=40,
                          what="the input-bound verdict")

        def share(s):
            m = re.search(r"data wait (\d+)% of step time", s)
            return int(m.group(1)) if m else None

        # Once past the first steps (worker start-up), the share settles on the planted 70%.
        screen = wait_for(lambda: (s := t.screen()) and 62 <= (share(s) or 0) <= 78 and s, timeout=30,
                          what=f"the planted 70% data wait (last screen said {share(t.screen())}%)")
        later = wait_for(lambda: (n := step_of(t.screen())) and n > first and n, timeout=20, what="steps moving")
        assert later > first
        python = os.path.basename(sys.executable)  # "python" here, "python3" on the GPU machine
        assert f"PID {job.pid} {python} planted_wait.py 4" in screen  # (its arguments cut to fit the header)
        t.keys("r")
        wait_for(lambda: "Ranges over the last steps" in t.screen(), timeout=10, what="the ranges screen")
        t.keys("Escape")  # alone: Escape then q at once would arrive as Alt+q
        wait_for(lambda: "Where the step goes" in t.screen(), timeout=10, what="back on the main screen")
        t.keys("q")
        wait_for(lambda: not t.alive(), timeout=10, what="q to quit")
        assert job.poll() is None  # quitting the monitor leaves the job alone
    finally:
        t.kill()
        job.kill()
        job.wait()


def test_a_closed_terminal_ends_tuimon():
    cmd = " ".join(shlex.quote(x) for x in tuimon_cmd("replay", ROOT / "tests" / "fixtures" / "h200_demo.jsonl"))
    t = Tmux(cmd, size=(80, 24))
    try:
        wait_for(lambda: "tuimon" in t.screen() and "GPU 0" in t.screen(), timeout=30, what="the replay")
        pid = t.pane_pid()
        procs = [psutil.Process(pid)] + psutil.Process(pid).children(recursive=True)
        t.kill()  # like an SSH connection dropping: the pty goes away (SIGHUP)
        _, alive = psutil.wait_procs(procs, timeout=10)
        assert alive == [], f"still running after its terminal closed: {alive}"
    finally:
        t.kill()
        time.sleep(0)


def test_a_terminal_gone_without_a_hangup_signal_ends_tuimon():
    """The terminal can go without a SIGHUP reaching tuimon (nohup; a pty that is not its controlling
    terminal, as here): Textual's input thread then read end-of-file in a loop, at 55% of a core for
    good. tuimon sees the hangup in poll() and exits, within a few seconds."""
    import fcntl
    import struct
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    p = subprocess.Popen(tuimon_cmd("replay", ROOT / "tests" / "fixtures" / "h200_demo.jsonl"), stdin=slave,
                         stdout=slave, stderr=slave, env={**env, "TERM": "xterm-256color"}, start_new_session=True)
    os.close(slave)
    try:
        seen = b""
        deadline = time.monotonic() + 60
        while b"GPU 0" not in seen and time.monotonic() < deadline and p.poll() is None:
            try:
                seen += os.read(master, 65536)
            except OSError:
                break
        assert b"GPU 0" in seen, seen[-500:]
        time.sleep(1.5)  # (a live terminal: it keeps running)
        assert p.poll() is None
        os.close(master)
        master = -1
        assert p.wait(timeout=15) == 0
    finally:
        if master >= 0:
            os.close(master)
        if p.poll() is None:
            p.kill()
            p.wait()


def colour_codes(screen: str) -> set[str]:
    """SGR parameters on screen other than reset, bold/dim/italic/underline/reverse and the
    terminal's default colours: what NO_COLOR must leave out."""
    plain = {"", "0", "1", "2", "3", "4", "7", "22", "23", "24", "27", "39", "49"}
    return {p for seq in re.findall(r"\x1b\[([0-9;:]*)m", screen) for p in re.split("[;:]", seq)} - plain


@pytest.mark.parametrize("no_color", [False, True])
def test_no_color_is_honoured_on_every_screen(no_color):
    replay = " ".join(shlex.quote(x) for x in tuimon_cmd("replay", ROOT / "tests" / "fixtures" / "h200_demo.jsonl"))
    t = Tmux(("NO_COLOR=1 " if no_color else "") + replay)
    try:
        main = wait_for(lambda: "GPU 0" in (s := t.screen(escapes=True)) and "Where the step goes" in s and s,
                        timeout=30, what="the replay's main screen")
        t.keys("g")
        gpu = wait_for(lambda: "samples ago" in (s := t.screen(escapes=True)) and s, timeout=10,
                       what="the GPU detail plot")
        for screen in (main, gpu):
            assert (colour_codes(screen) == set()) == no_color, sorted(colour_codes(screen))
    finally:
        t.kill()


def test_c_in_a_real_terminal_takes_a_capture_of_the_running_job(shm_dir, tmp_path, monkeypatch):
    captures = tmp_path / "captures"
    monkeypatch.setenv("TUIMON_CAPTURE_DIR", str(captures))  # the job and the monitor both see it
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, PLANTED, 3000, 0.02, 0.004),
                           stdout=subprocess.PIPE, text=True)
    assert job.stdout.readline().strip() == "training"
    t = Tmux(" ".join(shlex.quote(x) for x in tuimon_cmd("attach", job.pid, "--interval", "0.5")))
    try:
        wait_for(lambda: "c: capture 10 steps with torch.profiler" in t.screen(), timeout=30,
                 what="the capture line saying what c will take")
        t.keys(*"-----")  # 10 -> 5 steps, one at a time below 10
        wait_for(lambda: "c: capture 5 steps" in t.screen(), timeout=10, what="- to shorten the window")
        t.keys("c")
        screen = wait_for(lambda: "last capture 1: steps" in (s := t.screen()) and "top operators" in s and s,
                          timeout=60, what="the finished capture and its summary on screen")
        first, last = map(int, re.search(r"last capture 1: steps (\d+)\.\.(\d+)", screen).groups())
        assert last - first + 1 == 5
        traces = list(captures.glob("*.pt.trace.json.gz"))
        assert len(traces) == 1 and traces[0].name[:40] in screen  # the file it names exists
        assert job.poll() is None
    finally:
        t.kill()
        job.kill()
        job.wait()


def test_run_in_a_real_terminal_keeps_the_jobs_output_in_a_named_file(shm_dir):
    job = "import time, tuimon; print('hello from the job', flush=True); [tuimon.step() or time.sleep(0.05) for _ in range(2000)]"
    run = " ".join(shlex.quote(x) for x in tuimon_cmd("run", "--", sys.executable, "-c", job))
    t = Tmux(f"sh -c {shlex.quote(run + '; sleep 30')}")  # the shell keeps the pane after tuimon exits
    pid = None
    try:
        screen = wait_for(lambda: (s := t.screen()) and step_of(s) and s, timeout=30, what="the job's steps on screen")
        pid = int(re.search(r"PID (\d+)", screen).group(1))
        t.keys("q")
        line = wait_for(lambda: re.search(r"tuimon: the job's output is in (\S+)", t.screen()), timeout=15,
                        what="where the job's output went")
        log = line.group(1)
        assert os.path.basename(log).startswith("job-") and log.endswith(".log")
        assert open(log).read().startswith("hello from the job")
        assert os.stat(log).st_mode & 0o777 == 0o600
        assert psutil.pid_exists(pid)  # quitting `tuimon run` leaves the job running
    finally:
        t.kill()
        if pid and psutil.pid_exists(pid):
            psutil.Process(pid).kill()


def test_a_dropped_terminal_also_stops_the_demo_job(shm_dir):
    """`tuimon demo` stops its job when it quits; an SSH drop (the pty goes away) is a quit too."""
    t = Tmux(" ".join(shlex.quote(x) for x in tuimon_cmd("demo", "--interval", "0.5")))
    job = None
    try:
        screen = wait_for(lambda: (s := t.screen()) and step_of(s) and s, timeout=60, what="the demo's steps")
        job = psutil.Process(int(re.search(r"PID (\d+)", screen).group(1)))
        assert "tuimon.workloads.demo_train" in " ".join(job.cmdline())
        t.kill()
        _, alive = psutil.wait_procs([job], timeout=20)
        assert alive == [], "the demo job outlived its monitor's terminal"
    finally:
        t.kill()
        if job is not None and job.is_running():
            job.kill()


@pytest.mark.parametrize("key", ["q", "C-c"])
def test_quitting_the_demo_stops_its_job_cleanly_and_exits_0(shm_dir, key):
    """q, or Ctrl-C (a key in the TUI, as in top)."""
    demo = " ".join(shlex.quote(x) for x in tuimon_cmd("demo", "--interval", "0.5"))
    t = Tmux(f"sh -c {shlex.quote(demo + '; echo tuimon-exit=$?; sleep 30')}", size=(160, 40))  # room for the label
    job = None
    try:
        screen = wait_for(lambda: (s := t.screen()) and step_of(s) and s, timeout=60, what="the demo's steps")
        assert "[tuimon demo" in screen  # (not "tuimon run")
        job = psutil.Process(int(re.search(r"PID (\d+)", screen).group(1)))
        t.keys("?")
        assert wait_for(lambda: "quit and stop the demo job" in t.screen(), timeout=10, what="the demo's help")
        t.keys("Escape")  # (then wait: an Escape followed at once by q would read as alt+q)
        wait_for(lambda: "quit and stop the demo job" not in t.screen(), timeout=10, what="the help closed")
        t.keys(key)
        end = wait_for(lambda: re.search(r"tuimon-exit=(\d+)", t.screen()), timeout=30, what="tuimon's exit")
        assert end.group(1) == "0"
        _, alive = psutil.wait_procs([job], timeout=10)
        assert alive == []
        log = re.search(r"the job's output is in (\S+)", t.screen()).group(1)
        text = open(log).read()
        assert "demo workload stopped" in text and "Traceback" not in text, text[-2000:]
    finally:
        t.kill()
        if job is not None and job.is_running():
            job.kill()


def test_a_job_that_fails_at_start_shows_its_log_and_last_lines(shm_dir):
    run = " ".join(shlex.quote(x) for x in tuimon_cmd("run", "--", sys.executable, "-c",
                                                      "import tuimon_no_such_module"))
    t = Tmux(f"sh -c {shlex.quote(run + '; sleep 30')}")
    try:
        screen = wait_for(lambda: (s := t.screen()) and "its output:" in s and "ModuleNotFoundError" in s and s,
                          timeout=30, what="the failed job's log on screen")
        assert "PROCESS EXITED" in screen and "exited with code 1" in screen
        assert re.search(r"its output: \S+job-\S+\.log", screen)
        t.keys("q")
        assert wait_for(lambda: "tuimon: the job exited with code 1" in t.screen(), timeout=15, what="the exit line")
    finally:
        t.kill()


def test_the_ranks_of_a_ddp_job_and_n(tmp_path):
    """A torchrun job (2 gloo ranks, rank 1 planted slow): the Ranks panel lists both with the
    straggler named, and n moves the detail (the header) to rank 1."""
    from tests.test_ranks import ddp_job, stop, truths

    job = ddp_job(tmp_path, "--slow-rank", "1", "--slow-ms", "60", "--slow-how", "sleep", seconds=40)
    t = None
    try:
        truths(tmp_path, 110)
        t = Tmux(shlex.join(tuimon_cmd("attach", job.pid)), size=(120, 45))

        def screen_where(pred, what):
            return wait_for(lambda: (lambda s: s if pred(s) else None)(t.screen()), timeout=30, what=what)
        screen = screen_where(lambda s: "STRAGGLER" in s, "the Ranks panel")
        assert "rank 0/2" in screen and re.search(r"^\s*\*\s+0\s", screen, re.M) and "STRAGGLER: RANK 1" in screen
        t.keys("n")
        screen_where(lambda s: "rank 1/2" in s, "the detail on rank 1")
        screen_where(lambda s: re.search(r"^\s*\*\s+1\s", s, re.M), "* on rank 1")
    finally:
        if t is not None:
            t.kill()
        stop(job)
