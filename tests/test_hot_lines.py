"""The lines behind the time on real CPU loops (tests/workloads/planted.py), each beside its own
timers: a Python hot spot outside the model, a wait in a native call, an optimizer updating 600
parameters one by one. The hot line's share of the loop's time is within 0.1 of the loop's own,
and the verdict's next step follows it. The loops run together (their truth is wall time: sharing
the 2 cores slows them, not their shares)."""

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, tuimon_cmd, wait_for

PLANTED = str(ROOT / "tests" / "workloads" / "planted.py")
KINDS = ("hotspot", "wait", "optimizer")


@pytest.fixture(scope="module")
def attached(tmp_path_factory):
    """Each loop under `tuimon run --headless` for a while, then `attach --once --json` beside its truth.
    Each job first sets itself up for 4 s (Python at a line of its own, before its first step, inside
    the hot lines' 10 s span at the attach): the loop's shares are of the loop's time, not the setup's
    (the H100's lock wait read 0.67 against 0.82 with its setup's lines counted)."""
    base = tmp_path_factory.mktemp("hot")
    env = {**os.environ, "TUIMON_SHM_DIR": str(base)}
    jobs = {k: subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, PLANTED, k, "--seconds", 40, "--setup-s", 4,
                                           "--device", "cpu", "--truth", base / f"{k}.json"),
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for k in KINDS}
    try:
        wait_for(lambda: all(os.path.exists(base / f"{k}.json") for k in KINDS), timeout=60, what="the loops' truth")
        time.sleep(5)  # (a window of steps with samples in it; the setup still inside the 10 s span)
        out = {}
        for k, job in jobs.items():
            r = subprocess.run(tuimon_cmd("attach", job.pid, "--once", "--json", "--window", 2), env=env,
                               capture_output=True, text=True, timeout=60)
            out[k] = (json.loads(r.stdout), json.load(open(base / f"{k}.json")))
        return out
    finally:
        for job in jobs.values():
            job.kill()
            job.wait()


def top(doc, phase=None):
    lines = [h for h in doc["hot_lines"] if phase is None or h["phase"] == phase]
    return max(lines, key=lambda h: h["share"])


def test_a_python_hot_spot_outside_the_model(attached):
    doc, truth = attached["hotspot"]
    h = top(doc)
    print("hotspot:", h, "truth", truth["hot_share"])
    assert h["phase"] == "other" and "in spin `while time.perf_counter() < end:`" in h["line"]
    assert abs(h["share"] - truth["hot_share"]) <= 0.1 and h["python"] >= 0.8
    assert doc["verdict"]["headline"] == "host-bound: Python outside the model"
    assert "in spin" in doc["verdict"]["next_step"]


def test_a_wait_in_a_native_call(attached):
    doc, truth = attached["wait"]
    h = top(doc)
    print("wait:", h, "truth", truth["hot_share"])
    assert h["phase"] == "other" and "held.acquire(timeout=0.02)" in h["line"]
    assert abs(h["share"] - truth["hot_share"]) <= 0.1 and h["waiting"] >= 0.6  # (most of it: a loaded machine wakes it late)
    assert doc["verdict"]["headline"] == "host-bound: the loop waits elsewhere"
    assert "held.acquire" in doc["verdict"]["next_step"] and "blocked" in doc["verdict"]["next_step"]


def test_an_optimizer_updating_parameters_one_by_one(attached):
    doc, truth = attached["optimizer"]
    h = top(doc, "optimizer")
    print("optimizer:", h, "truth", truth["shares"]["optimizer"], doc["optimizer"])
    assert "`opt.step()`" in h["line"] and abs(h["share"] - truth["shares"]["optimizer"]) <= 0.1
    assert doc["optimizer"] == "SGD foreach=False fused=False params=600"
    assert doc["verdict"]["headline"] == "CPU-bound: the optimizer step"  # (no CUDA, the loop thread near a core)
    assert "foreach=True" in doc["verdict"]["next_step"]


STOP_SCRIPT = r"""
import os, sys, threading, time
sys.path.insert(0, sys.argv[1])
from tuimon.channel import _fastring as native

def tasks():
    return set(os.listdir("/proc/self/task"))

before = tasks()
fd = native.sample_start(1000.0, threading.main_thread().native_id, (), None)
assert fd >= 0, fd
end = time.perf_counter() + 0.3
while time.perf_counter() < end:  # Python running: the thread's requests are taken
    pass
new = tasks() - before
assert len(new) == 1, "the sampler's thread"
native.sample_stop()

def running_user_code(tid):
    # pthread_join returns once the kernel has begun the thread's exit (the futex wake comes from
    # inside do_exit), so its task may still be listed for a moment: it must then carry PF_EXITING.
    try:
        with open(f"/proc/self/task/{tid}/stat") as f:
            flags = int(f.read().rsplit(")", 1)[1].split()[6])
    except (FileNotFoundError, ProcessLookupError):
        return False
    return not flags & 0x4

print(sum(running_user_code(t) for t in new))
"""


def test_stopping_the_sampler_waits_for_its_thread():
    """At exit the probe stops the sampler: no request may reach an interpreter being torn down
    (a job that raised once died of SIGABRT at exit beside a request in flight), so stop returns
    once the native thread has ended (left its code: gone from /proc, or exiting)."""
    native = pytest.importorskip("tuimon.channel._fastring")
    if not hasattr(native, "sample_start"):
        pytest.skip("the C sampler is not built")
    r = subprocess.run([sys.executable, "-c", STOP_SCRIPT, str(ROOT)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "0", r.stdout + r.stderr


HOW_SCRIPT = r"""
import hashlib, os, sys, threading, time
sys.path.insert(0, sys.argv[1])
from tuimon.channel import _fastring as native

fd = native.sample_start(200.0, threading.main_thread().native_id, (), None)
os.set_blocking(fd, False)
def taken():
    try:
        return os.read(fd, 1 << 16).decode()
    except BlockingIOError:
        return ""
time.sleep(0.5)  # asleep inside a native call
asleep = taken()
data = bytes(600 << 20)
taken()
end = time.perf_counter() + 0.5
while time.perf_counter() < end:
    hashlib.sha256(data).digest()  # on a CPU inside a native call (no pending call runs meanwhile)
on_cpu = taken()
native.sample_stop()
print(asleep.count("S"), asleep.count("R"), on_cpu.count("S"), on_cpu.count("R"))
"""


def test_the_periods_sampled_from_outside_say_whether_the_main_thread_slept():
    """The native thread reads the main thread's state (/proc, no GIL) and says it in the byte it
    sends for each period the Python thread samples from outside: waiting ('S') or on a CPU ('R')."""
    native = pytest.importorskip("tuimon.channel._fastring")
    if not hasattr(native, "sample_start"):
        pytest.skip("the C sampler is not built")
    r = subprocess.run([sys.executable, "-c", HOW_SCRIPT, str(ROOT)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    slept_s, slept_r, cpu_s, cpu_r = map(int, r.stdout.split())
    assert slept_s > 3 * slept_r and cpu_r > 3 * cpu_s, r.stdout


def test_a_frame_at_no_line_is_named_by_its_function():
    """A frame read from another thread can be between lines (f_lineno None while it is set up or
    torn down): it is named by its function, never passed to linecache (which raised TypeError in the
    sampler thread of a demo job beside two CPU burners, into the job's stderr)."""
    from types import SimpleNamespace

    from tuimon.probe.sampler import LineNames

    def job_function():
        pass

    names = LineNames(intern=lambda name: hash(name))
    at_no_line = SimpleNamespace(f_code=job_function.__code__, f_lineno=None, f_back=None)
    assert names.name_of(at_no_line) == "tests/test_hot_lines.py in job_function"
    at_a_line = SimpleNamespace(f_code=job_function.__code__, f_lineno=job_function.__code__.co_firstlineno + 1,
                                f_back=None)
    assert names.name_of(at_a_line).endswith("in job_function `pass`")


def test_the_bundled_demo_is_the_jobs_own_code_and_torch_in_a_venv_is_named_by_its_package():
    """The demo's loop lives in tuimon/workloads/: its lines are the job's own (tuimon's other code is
    not: its frames are skipped); torch inside a virtual environment under the working directory is
    named from its package (its samples in backward once all fell through to
    `.venv/lib/python3.11/site-packages/torch/autograd/graph.py:979`, the demo's own line skipped)."""
    from types import SimpleNamespace

    import tuimon.probe.sampler as sampler_module
    import tuimon.workloads.demo_train as demo
    from tuimon.probe.anatomy import short_path
    from tuimon.probe.sampler import LineNames

    names = LineNames(intern=lambda name: hash(name))
    demo_code, probe_code = demo.train.__code__, sampler_module.LineNames.name_of.__code__
    in_demo = SimpleNamespace(f_code=demo_code, f_lineno=demo_code.co_firstlineno, f_back=None)
    in_probe = SimpleNamespace(f_code=probe_code, f_lineno=probe_code.co_firstlineno, f_back=in_demo)
    assert names.name_of(in_probe).startswith("tuimon/workloads/demo_train.py:")
    assert short_path(os.path.join(os.getcwd(), ".venv/lib/python3.11/site-packages/torch/autograd/graph.py")) == \
        "torch/autograd/graph.py"


SETUP_THEN_LOOP = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import tuimon
from tuimon.channel import layout as L
from tuimon.channel.reader import SegmentReader

status = tuimon.instrument()
import torch.utils.data  # (the job's first step starts at its first batch)

def setup_spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

def loop_spin(seconds):
    if sys.argv[2] == "sleep":  # (a native call: the outside thread samples it, and may cut first)
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

setup_spin(0.7)
for _ in torch.utils.data.DataLoader(range(40), batch_size=None):
    loop_spin(0.01)
    tuimon.step()
time.sleep(0.8)  # (the control thread writes the samples every ~0.2 s)
r = SegmentReader(status.path)
recs = r.drain().records
first_t0 = min(rec[6] for rec in recs if rec[0] == L.STEP and rec[5] == 1)
hot = [(r.name(rec[3]), rec[7], rec[8]) for rec in recs if rec[0] == L.HOT]
print(json.dumps({"first_t0": first_t0,
                  "setup": [(t, n) for name, t, n in hot if "in setup_spin" in name],
                  "loop": [(t, n) for name, t, n in hot if "in loop_spin" in name]}))
"""


@pytest.mark.parametrize("loop", ["spin", "sleep"])
def test_the_setups_samples_are_written_before_the_first_step_starts(loop):
    """The monitor counts hot lines from the job's first step (its setup is not the loop's time):
    samples taken before that start are written stamped before it, though the probe writes its
    samples every ~0.2 s (a write after the start carried the last setup samples into the loop's
    lines: 17 samples of an H100 job's setup line `opt = torch.optim.SGD(...)`). Also where the
    loop waits in native calls: the thread that samples those made the cut first, and the setup's
    last samples, taken before the start but read after the cut, went to the loop."""
    env = {**os.environ, "TUIMON_SAMPLE_HZ": "200"}
    r = subprocess.run([sys.executable, "-c", SETUP_THEN_LOOP, str(ROOT), loop], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    first, setup, loop = doc["first_t0"], doc["setup"], doc["loop"]
    assert sum(n for _, n in setup) >= 20 and sum(n for _, n in loop) >= 20, doc  # (~140 and ~80 at 200 Hz)
    late = [(t - first, n) for t, n in setup if t >= first]
    assert late == [], late
    assert all(t >= first for t, _ in loop), doc


def test_the_monitor_keeps_the_sampler_records_of_twice_the_span_it_shows(shm_dir):
    """A minute of the sampler's records (one a 0.1 s, a line each second, line n 1 + n samples a
    record: the newest 10 s are the span shown, HOT_SPAN_S) through a real channel: the hot lines
    count the span's samples, and the view keeps only twice the span's records after (it kept
    HOT_RECORDS: hours of a slow sampler)."""
    from tuimon.channel import SegmentReader, SegmentWriter
    from tuimon.channel import layout as L
    from tuimon.channel.meta import JobMeta
    from tuimon.monitor.training import HOT_SPAN_S, TrainingView
    from tuimon.sources.channel import ChannelSource

    w = SegmentWriter.create(JobMeta(argv=("train.py",)), 1 << 12)
    lines = [w.intern(f"train.py:{n} in loop") for n in range(60)]
    now = time.monotonic_ns()
    for k in range(600):  # (a second of records at a line of its own: line 59 is the newest second's)
        t = now - (600 - k) * 100_000_000
        w.emit(L.HOT, L.PHASES.index("other"), lines[k // 10], 1, 0, L.HOW_PYTHON, t, 1.0 + k // 10)
    view = TrainingView(ChannelSource(SegmentReader(w.path)))
    view.poll()
    shown = view.snapshot().hot_lines
    # the newest 10 s: lines 50..59 (their records, not a minute's 60 lines), the top 5 of them 55..59
    assert {h.line: h.samples for h in shown} == {f"train.py:{n} in loop": 10 * (1 + n) for n in range(55, 60)}
    kept = [t for t, *_ in view.steps.hot]
    assert len(kept) <= 2 * HOT_SPAN_S * 10 + 10 and min(kept) >= now - 2 * HOT_SPAN_S * 1e9 - 1e9
    assert {h.line for h in view.snapshot().hot_lines} == {h.line for h in shown}  # (the same lines after)


def test_during_a_long_step_the_records_of_the_window_are_kept(shm_dir):
    """100 steps of 0.1 s, then a step of 30 s still running (a checkpoint): the span shown is 10 s,
    but when the long step ends the window reaches back to its oldest step, so the records from
    there on stay (not only twice the span: the hot lines of the next window would miss its start)."""
    from tuimon.channel import SegmentReader, SegmentWriter
    from tuimon.channel import layout as L
    from tuimon.channel.meta import JobMeta
    from tuimon.monitor.training import TrainingView
    from tuimon.sources.channel import ChannelSource

    w = SegmentWriter.create(JobMeta(argv=("train.py",)), 1 << 12)
    line = w.intern("train.py:7 in loop")
    now = time.monotonic_ns()
    oldest = now - 40 * 10**9
    for k in range(1, 101):  # (steps 1..100 from 40 s ago to 30 s ago; step 101 runs since)
        w.emit(L.STEP, 0, 0, 1, k, oldest + (k - 1) * 10**8, oldest + k * 10**8, 0.0)
    for k in range(600):  # a record a 0.1 s over the last minute
        w.emit(L.HOT, L.PHASES.index("other"), line, 1, 101, L.HOW_PYTHON, now - (600 - k) * 10**8, 1.0)
    view = TrainingView(ChannelSource(SegmentReader(w.path)))
    view.poll()
    view.snapshot()
    kept = [t for t, *_ in view.steps.hot]
    assert min(kept) <= oldest + 10**8 and len(kept) >= 399, (len(kept), (min(kept) - oldest) / 1e9)  # (the window: steps 2..100)
