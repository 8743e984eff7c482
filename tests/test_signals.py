"""Signals and lifetimes (issue 28): what the job hears when `tuimon run` or `tuimon demo` is
signalled, in each mode, with real processes. The job (tests/workloads/signals.py) writes every
signal it gets to a file and ends with a code of its own (40 + N), so a wrapper that passes the
signal on and keeps the job's code is told apart from one that does neither."""

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import ROOT, tuimon_cmd, wait_for
from tests.test_tmux import Tmux, step_of

SIGNALS = str(ROOT / "tests" / "workloads" / "signals.py")
EXIT_BASE = 40  # the job's code for signal N: EXIT_BASE + N
STOPS = [signal.SIGTERM, signal.SIGINT, signal.SIGQUIT]
needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def lines(out) -> list[str]:
    try:
        return out.read_text().splitlines()
    except FileNotFoundError:
        return []


def ready_pid(out, who="ready") -> int:
    line = wait_for(lambda: next((x for x in lines(out) if x.startswith(who + " ")), None), timeout=60,
                    what=f"the job's '{who}' line")
    return int(line.split()[-1])


def tree(pid: int) -> list[psutil.Process]:
    p = psutil.Process(pid)
    return [p, *p.children(recursive=True)]


def running(p: psutil.Process) -> bool:
    """Still running: a zombie (ended, not yet reaped by whoever adopted it) is not."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def gone(procs, timeout=30) -> list:
    """Those of procs still running after timeout s."""
    procs = list(procs)
    end = time.monotonic() + timeout
    while time.monotonic() < end and any(running(p) for p in procs):
        time.sleep(0.1)
    return [p for p in procs if running(p)]


def kill_all(procs):
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


HANGUP_AT_DEFAULT = ("import os, signal, sys; signal.signal(signal.SIGHUP, signal.SIG_DFL); "
                     "os.execvp(sys.argv[1], sys.argv[1:])")


class Plain:
    """`tuimon run --plain` (or demo) in the background, stdout and stderr to files."""

    def __init__(self, tmp_path, *args, prefix=()):
        """prefix: what runs it (unshare ...); with no args, prefix is the whole command."""
        self.out, self.err = tmp_path / "tuimon.out", tmp_path / "tuimon.err"
        command = [*prefix, *tuimon_cmd(*args)] if args else list(prefix)
        with open(self.out, "w") as o, open(self.err, "w") as e:
            # SIGHUP as a terminal's session has it: a suite run under nohup would hand tuimon an
            # ignored SIGHUP, which it rightly leaves ignored (nohup's meaning), and every hangup
            # test here would wait out its timeout (reset in a process that then execs tuimon: the
            # same PID; preexec_fn is unsafe in a process with threads)
            self.p = subprocess.Popen([sys.executable, "-c", HANGUP_AT_DEFAULT, *map(str, command)],
                                      stdin=subprocess.DEVNULL, stdout=o, stderr=e)

    def stderr(self) -> str:
        return self.err.read_text()

    def wait(self, timeout=60) -> int:
        return self.p.wait(timeout=timeout)


def plain_job(tmp_path, *job_args):
    out = tmp_path / "signals.txt"
    t = Plain(tmp_path, "run", "--plain", "--interval", "0.5", "--", sys.executable, SIGNALS, out, *job_args)
    return t, out


# `tuimon run --plain` ------------------------------------------------------------------------------

@pytest.mark.parametrize("sig", STOPS, ids=lambda s: s.name)
def test_plain_passes_a_stop_signal_to_the_jobs_group_and_ends_with_its_code(tmp_path, sig):
    t, out = plain_job(tmp_path, "--child")
    job = ready_pid(out)
    ready_pid(out, "child ready")
    try:
        t.p.send_signal(sig)
        assert t.wait() == EXIT_BASE + sig  # the job's own code, not 128+N
        name = sig.name.removeprefix("SIG")
        got = lines(out)
        assert got.count(name) == 1 and got.count(f"child {name}") == 1, got  # each hears it, once
        err = t.stderr()
        assert f"tuimon: {sig.name}: passed on to the job (PID {job} and its process group)" in err
        assert err.splitlines()[-1] == f"tuimon: the job exited with code {EXIT_BASE + sig}"
    finally:
        kill_all(p for p in psutil.process_iter() if p.pid == job)


@needs_tmux
def test_plain_ctrl_c_at_the_terminal_reaches_the_job_once(tmp_path):
    """The terminal signals its foreground group: tuimon alone (the job has a session of its
    own), which passes it on once; a job sharing the group would hear it twice (a double Ctrl-C
    means 'stop now' to many loops)."""
    out = tmp_path / "signals.txt"
    run = shlex.join(tuimon_cmd("run", "--plain", "--interval", "0.5", "--", sys.executable, SIGNALS, out, "--child"))
    # (bash: the Ctrl-C reaches the shell too, and bash goes on when its child did not die of it)
    t = Tmux(f"bash -c {shlex.quote(run + '; echo tuimon-exit=$?; sleep 30')}")
    try:
        ready_pid(out)
        ready_pid(out, "child ready")
        wait_for(lambda: "pid " in t.screen(), timeout=30, what="the plain lines")
        t.keys("C-c")
        end = wait_for(lambda: re.search(r"tuimon-exit=(\d+)", t.screen()), timeout=30, what="tuimon's exit")
        assert end.group(1) == str(EXIT_BASE + signal.SIGINT)
        got = lines(out)
        assert got.count("INT") == 1 and got.count("child INT") == 1, got
    finally:
        t.kill()


def test_a_second_stop_signal_sends_sigkill_after_the_grace_period_it_names(tmp_path):
    t, out = plain_job(tmp_path, "--stubborn")
    job = psutil.Process(ready_pid(out))
    try:
        t.p.send_signal(signal.SIGTERM)
        wait_for(lambda: "TERM" in lines(out), timeout=20, what="the job's TERM")
        time.sleep(0.5)
        assert job.is_running() and t.p.poll() is None  # a stubborn job: tuimon waits for it
        t.p.send_signal(signal.SIGINT)
        wait_for(lambda: "SIGINT again" in t.stderr(), timeout=20, what="the second signal's notice")
        assert "the job gets SIGKILL in 10 s if it has not ended" in t.stderr()
        assert job.is_running()  # not at once: the grace period first
        assert t.wait(timeout=60) == 128 + signal.SIGKILL
        assert lines(out)[-2:] == ["TERM", "INT"]  # both passed on before the SIGKILL
        err = t.stderr()
        assert "SIGKILL to the job" in err and err.splitlines()[-1] == "tuimon: the job was killed by SIGKILL"
    finally:
        kill_all([job])


def test_plain_hangup_ends_the_monitor_and_the_run_job_goes_on(tmp_path):
    t, out = plain_job(tmp_path)
    job = psutil.Process(ready_pid(out))
    try:
        t.p.send_signal(signal.SIGHUP)
        assert t.wait() == 0
        time.sleep(0.5)
        assert job.is_running() and "HUP" not in lines(out)  # the job never hears the hangup
        assert f"the job (PID {job.pid}) goes on; watch it again with `tuimon attach {job.pid}`" in t.stderr()
        log = re.search(r"the job's output is in (\S+)", t.stderr()).group(1)
        assert os.path.exists(log)
    finally:
        kill_all([job])


def test_headless_is_the_job_itself(tmp_path):
    out = tmp_path / "signals.txt"
    p = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, SIGNALS, out))
    try:
        assert ready_pid(out) == p.pid  # exec: the job has tuimon's PID...
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == EXIT_BASE + signal.SIGTERM  # ...its signals and its code
    finally:
        p.kill()
    help_text = subprocess.run(tuimon_cmd("run", "--help"), capture_output=True, text=True, timeout=60).stdout
    assert "exec: the same PID" in " ".join(help_text.split())


# `tuimon run` with the TUI ---------------------------------------------------------------------------

def tui_job(tmp_path, *job_args, options=()):
    out = tmp_path / "signals.txt"
    run = shlex.join(tuimon_cmd("run", "--interval", "0.5", *options, "--", sys.executable, SIGNALS, out, *job_args))
    t = Tmux(f"sh -c {shlex.quote(run + '; echo tuimon-exit=$?; sleep 30')}")
    return t, out


def tuimon_of(job: int) -> psutil.Process:
    return psutil.Process(job).parent()


@needs_tmux
@pytest.mark.parametrize("sig", STOPS, ids=lambda s: s.name)
def test_tui_passes_a_stop_signal_on_and_ends_with_the_jobs_code(tmp_path, sig):
    """A scheduler's SIGTERM (or a kill -INT) to tuimon's process: not a key, so it is passed on;
    the TUI ends and tuimon waits for the job, saying so."""
    t, out = tui_job(tmp_path, "--child")
    try:
        job = ready_pid(out)
        ready_pid(out, "child ready")
        wait_for(lambda: "[tuimon run, every" in t.screen(), timeout=30, what="the TUI")
        tuimon_of(job).send_signal(sig)
        end = wait_for(lambda: re.search(r"tuimon-exit=(\d+)", t.screen()), timeout=30, what="tuimon's exit")
        assert end.group(1) == str(EXIT_BASE + sig)
        name = sig.name.removeprefix("SIG")
        got = lines(out)
        assert got.count(name) == 1 and got.count(f"child {name}") == 1, got
        screen = " ".join(t.screen().split())  # (the notice wraps)
        assert f"tuimon: {sig.name}: passed on to the job (PID {job} and its process group)" in screen
        assert f"tuimon: the job exited with code {EXIT_BASE + sig}" in screen
    finally:
        t.kill()


@needs_tmux
def test_tui_a_stop_signal_as_it_starts_still_ends_it(tmp_path):
    """SIGTERM the moment the job is up, the TUI maybe not yet: it still ends with the job."""
    t, out = tui_job(tmp_path)
    try:
        job = ready_pid(out)
        tuimon_of(job).send_signal(signal.SIGTERM)
        end = wait_for(lambda: re.search(r"tuimon-exit=(\d+)", t.screen()), timeout=30, what="tuimon's exit")
        assert end.group(1) == str(EXIT_BASE + signal.SIGTERM) and lines(out).count("TERM") == 1
    finally:
        t.kill()


@needs_tmux
def test_tui_ctrl_c_key_quits_the_monitor_and_the_job_goes_on(tmp_path):
    t, out = tui_job(tmp_path)
    job = None
    try:
        job = psutil.Process(ready_pid(out))
        wait_for(lambda: "[tuimon run, every" in t.screen(), timeout=30, what="the TUI")
        t.keys("C-c")
        end = wait_for(lambda: re.search(r"tuimon-exit=(\d+)", t.screen()), timeout=30, what="tuimon's exit")
        assert end.group(1) == "0"
        assert job.is_running() and "INT" not in lines(out)
        assert f"the job (PID {job.pid}) goes on" in t.screen()
    finally:
        t.kill()
        if job is not None:
            kill_all([job])


@needs_tmux
def test_tui_says_the_metrics_port_it_got(tmp_path):
    """--metrics-port 0: the port the system chose, in the header and on stderr (issue 26.11)."""
    t, out = tui_job(tmp_path, options=("--metrics-port", "0"))
    job = None
    try:
        job = psutil.Process(ready_pid(out))
        header = wait_for(lambda: re.search(r"metrics on :(\d+)\]", t.screen()), timeout=30, what="the header")
        port = int(header.group(1))
        assert port > 0
        t.keys("q")
        wait_for(lambda: "goes on" in t.screen(), timeout=30, what="the quit")
        assert f"tuimon: metrics on http://127.0.0.1:{port}/metrics" in t.screen()
    finally:
        t.kill()
        if job is not None:
            kill_all([job])


@needs_tmux
def test_tui_a_dropped_terminal_leaves_the_run_job_running(tmp_path):
    t, out = tui_job(tmp_path)
    job = None
    try:
        job = psutil.Process(ready_pid(out))
        wait_for(lambda: "[tuimon run, every" in t.screen(), timeout=30, what="the TUI")
        monitor = tuimon_of(job.pid)
        t.kill()
        assert gone([monitor], timeout=20) == []
        assert job.is_running() and "HUP" not in lines(out)
    finally:
        t.kill()
        if job is not None:
            kill_all([job])


# `tuimon demo`: its job never outlives it ------------------------------------------------------------

def demo_job_in_tmux():
    t = Tmux(shlex.join(tuimon_cmd("demo", "--interval", "0.5")))
    screen = wait_for(lambda: (s := t.screen()) and step_of(s) and s, timeout=90, what="the demo's steps")
    job = psutil.Process(int(re.search(r"PID (\d+)", screen).group(1)))
    assert "tuimon.workloads.demo_train" in " ".join(job.cmdline())
    wait_for(lambda: len(job.children()) >= 2, timeout=30, what="the demo's DataLoader workers")
    return t, job


@needs_tmux
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL, signal.SIGSEGV],
                         ids=lambda s: s.name)
def test_demo_in_the_tui_stops_its_job_however_tuimon_ends(sig):
    """SIGTERM (passed on), SIGHUP (a closed terminal), SIGKILL and a crash (SIGSEGV) of tuimon:
    the demo job and its DataLoader workers all end."""
    t, job = demo_job_in_tmux()
    procs = tree(job.pid)
    try:
        monitor = job.parent()
        monitor.send_signal(sig)
        assert gone([monitor], timeout=30) == []
        assert gone(procs, timeout=30) == [], f"left running after {sig.name}: {procs}"
    finally:
        t.kill()
        kill_all(procs)


def demo_plain(tmp_path, *prefix):
    t = Plain(tmp_path, "demo", "--plain", "--interval", "0.5", prefix=prefix)
    line = wait_for(lambda: re.search(r"started PID (\d+)", t.stderr()), timeout=60, what="the demo's start")
    job = psutil.Process(int(line.group(1)))
    wait_for(lambda: len(job.children()) >= 2, timeout=90, what="the demo's DataLoader workers")
    return t, job


def test_a_demo_worker_whose_loop_died_before_it_started_ends_itself():
    """The demo's workers ask the kernel to kill them when the loop dies; one that asks after the
    loop died (a kill while they start) gets no signal, and ends because its parent is not the loop."""
    code = "import os, sys; from tuimon.workloads.demo_train import die_with_the_loop; " \
           "die_with_the_loop(int(sys.argv[1]) or os.getppid(), 0); print('went on')"
    for loop_pid, lives in ((0, True), (1, False)):  # (0: its real parent; 1: a parent it does not have)
        p = subprocess.run([sys.executable, "-c", code, str(loop_pid)], capture_output=True, text=True, timeout=60)
        assert (p.returncode == 0 and p.stdout == "went on\n") if lives else (p.returncode == 1 and not p.stdout), p


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGKILL], ids=lambda s: s.name)
def test_demo_plain_stops_its_job_however_tuimon_ends(tmp_path, sig):
    t, job = demo_plain(tmp_path)
    procs = tree(job.pid)
    try:
        t.p.send_signal(sig)
        t.wait(timeout=60)
        assert gone(procs, timeout=30) == [], f"left running after {sig.name}: {procs}"
    finally:
        kill_all(procs)


def test_demo_stops_its_job_when_the_monitor_raises(tmp_path):
    """A monitor that fails with an exception (injected into its plain view: it raises once the
    test says so) still stops the job."""
    trigger = tmp_path / "crash-now"
    crash = ("import os, sys, time, tuimon.cli.textview as tv\n"
             "def boom(*a, **k):\n"
             f"    while not os.path.exists({str(trigger)!r}): time.sleep(0.1)\n"
             "    raise RuntimeError('the monitor crashed')\n"
             "tv.follow = boom\n"
             "from tuimon.cli.main import main\n"
             "sys.exit(main(['demo', '--plain']))\n")
    t = Plain(tmp_path, prefix=[sys.executable, "-c", crash])
    procs = []
    try:
        line = wait_for(lambda: re.search(r"started PID (\d+)", t.stderr()), timeout=60, what="the start")
        job = psutil.Process(int(line.group(1)))
        wait_for(lambda: len(job.children()) >= 2, timeout=90, what="the demo's DataLoader workers")
        procs = tree(job.pid)
        trigger.touch()
        assert t.wait(timeout=90) == 1 and "the monitor crashed" in t.stderr()
        assert gone(procs, timeout=30) == []
    finally:
        t.p.kill()
        kill_all(procs)


# PID 1: a container's entrypoint ---------------------------------------------------------------------

def unshare_prefix() -> list[str]:
    """A PID namespace with its own /proc, as root or through a user namespace; skips if neither."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    for prefix in (["unshare", "--pid", "--fork", "--mount-proc"],
                   ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]):
        probe = subprocess.run([*prefix, sys.executable, "-c", "import os; print(os.getpid())"],
                               capture_output=True, text=True, timeout=60)
        if probe.returncode == 0 and probe.stdout.strip() == "1":
            return prefix
    pytest.skip(f"no PID namespace here (unshare: {probe.stderr.strip()[:200]})")


def test_as_pid_1_it_reaps_the_jobs_orphans_passes_signals_on_and_keeps_the_code(tmp_path):
    out = tmp_path / "signals.txt"
    t = Plain(tmp_path, "run", "--plain", "--interval", "0.5", "--", sys.executable, SIGNALS, out, "--orphans", "3",
              "--child", prefix=unshare_prefix())
    try:
        assert ready_pid(out) == 3  # tuimon is PID 1 of the namespace, and its child (2) the job's parent
        init = wait_for(lambda: next((c for c in psutil.Process(t.p.pid).children()), None), what="tuimon")
        wait_for(lambda: sum(x.startswith("orphan ") for x in lines(out)) == 3, timeout=30, what="3 orphans' ends")

        def zombies():
            return [c for c in init.children() if c.status() == psutil.STATUS_ZOMBIE]
        wait_for(lambda: not zombies(), timeout=20, what="the orphans reaped")
        time.sleep(1)
        assert zombies() == []
        init.send_signal(signal.SIGTERM)  # from outside the namespace, as a container runtime does
        assert t.wait() == EXIT_BASE + signal.SIGTERM
        got = lines(out)
        assert got.count("TERM") == 1 and got.count("child TERM") == 1, got
    finally:
        t.p.kill()


@needs_tmux
def test_as_pid_1_quitting_the_tui_waits_for_the_job_and_ctrl_c_reaches_it_once(tmp_path):
    """tuimon's end would end the namespace, job and all: after q it waits, saying so; the
    terminal's Ctrl-C then reaches tuimon once (its own foreground group, as tini arranges), which
    passes it on."""
    out = tmp_path / "signals.txt"
    run = shlex.join([*unshare_prefix(), *tuimon_cmd("run", "--interval", "0.5", "--", sys.executable, SIGNALS, out,
                                                     "--stubborn")])
    t = Tmux(f"bash -c {shlex.quote(run + '; echo tuimon-exit=$?; sleep 30')}")
    job = None
    try:
        ready_pid(out)
        job = wait_for(lambda: next((p for p in psutil.process_iter(["cmdline"]) if str(out) in (p.info["cmdline"] or [])),
                                    None), what="the job's process")
        wait_for(lambda: "[tuimon run, every" in t.screen(), timeout=30, what="the TUI")
        t.keys("q")
        wait_for(lambda: "it waits for the job" in " ".join(t.screen().split()), timeout=30, what="the wait notice")
        time.sleep(1)
        assert "tuimon-exit" not in t.screen() and lines(out)[-1].startswith("ready")
        t.keys("C-c")
        wait_for(lambda: "INT" in lines(out), timeout=30, what="the job's INT")
        time.sleep(1.5)
        assert lines(out).count("INT") == 1, lines(out)  # not twice: from the terminal and through PID 1
        job.kill()
        end = wait_for(lambda: re.search(r"tuimon-exit=(\d+)", t.screen()), timeout=30, what="tuimon's exit")
        assert end.group(1) == str(128 + signal.SIGKILL)
    finally:
        t.kill()
        if job is not None:
            kill_all([job])
