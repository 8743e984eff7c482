"""The probe inside real processes: ranges, steps, data waits, hooks, threads and forks."""

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from tests.conftest import run_python, seg_path, tuimon_cmd
from tuimon.channel import SegmentReader, ring
from tuimon.channel import layout as L
from tuimon.probe import sampler


@pytest.fixture(autouse=True, params=["c", "python"])
def hot_path(request, monkeypatch):
    """Every scenario runs with the C hot path and with the pure-Python one."""
    if request.param == "c" and ring.IMPLEMENTATION != "c":
        pytest.skip(f"C hot path unavailable: {ring.C_UNAVAILABLE}")
    monkeypatch.setenv("TUIMON_PURE_PYTHON", "1" if request.param == "python" else "0")
    return request.param


def run_scenario(shm_dir, body: str, timeout=120):
    """Run body in a fresh instrumented Python; return (records as dicts, reader, stdout)."""
    want = "python" if os.environ.get("TUIMON_PURE_PYTHON") == "1" else "c"
    script = "import os, sys, time, threading\nimport tuimon\nst = tuimon.instrument()\n" \
             "assert st.enabled, st\nprint('PID', os.getpid(), flush=True)\n" \
             f"from tuimon.channel import ring\nassert ring.IMPLEMENTATION == {want!r}, ring.C_UNAVAILABLE\n" \
             + textwrap.dedent(body)
    p = run_python(script, timeout=timeout)
    assert p.returncode == 0, p.stderr
    pid = int(p.stdout.split("PID ")[1].split()[0])
    r = SegmentReader(seg_path(shm_dir, pid))
    b = r.drain()
    assert b.lost == 0 and b.corrupt == 0
    recs = [dict(kind=L.KIND_NAMES[x[0]], depth=x[1], name=r.name(x[3]), tid=x[4], step=x[5],
                 t0=x[6], t1=x[7], value=x[8]) for x in b.records]
    return recs, r, p


def of(recs, kind, name=None):
    return [x for x in recs if x["kind"] == kind and (name is None or x["name"] == name)]


def test_nested_ranges_on_two_threads(shm_dir):
    recs, _, _ = run_scenario(shm_dir, """
        def work(tag):
            for _ in range(50):
                with tuimon.range("outer-" + tag):
                    with tuimon.range("inner-" + tag):
                        time.sleep(0.0005)
        ts = [threading.Thread(target=work, args=(t,)) for t in "ab"]
        [t.start() for t in ts]; [t.join() for t in ts]
    """)
    for tag in "ab":
        outer, inner = of(recs, "range", "outer-" + tag), of(recs, "range", "inner-" + tag)
        assert len(outer) == len(inner) == 50
        assert {x["depth"] for x in outer} == {0} and {x["depth"] for x in inner} == {1}
        assert len({x["tid"] for x in outer + inner}) == 1  # one thread each
        for i, o in zip(inner, outer, strict=True):
            assert o["t0"] <= i["t0"] <= i["t1"] <= o["t1"]
    assert of(recs, "range", "outer-a")[0]["tid"] != of(recs, "range", "outer-b")[0]["tid"]


def test_decorator_counter_and_explicit_steps(shm_dir):
    recs, r, _ = run_scenario(shm_dir, """
        @tuimon.range("load")
        def load(x):
            return x * 2
        for i in range(5):
            assert load(i) == 2 * i
            tuimon.count("samples", 8)
            tuimon.step()
        with tuimon.range("a"):
            pass
        try:
            with tuimon.range("raises"):
                raise KeyError("kept")
        except KeyError:
            pass
    """)
    assert len(of(recs, "range", "load")) == 5 and r.steps == 5
    steps = of(recs, "step")
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5]
    assert all(a["t1"] == b["t0"] for a, b in zip(steps, steps[1:], strict=False))  # boundaries chain
    assert [c["step"] for c in of(recs, "count", "samples")] == [1, 2, 3, 4, 5]
    assert sum(c["value"] for c in of(recs, "count")) == 40
    assert of(recs, "range", "raises")[0]["depth"] == 0  # depth restored after an exception


OPTIMIZER_LOOP = """
    import torch
    net = torch.nn.Linear(4, 1)
    opts = [torch.optim.SGD(net.parameters(), lr=0.1)]
    if MODE == "two_optimizers":
        opts.append(torch.optim.Adam(net.parameters(), lr=0.1))
    for i in range(10):
        net(torch.randn(2, 4)).sum().backward()
        if MODE == "explicit_first":
            tuimon.step()
        for o in opts:
            o.step()
        if MODE == "both":
            tuimon.step()
"""


def test_steps_are_never_counted_twice(shm_dir):
    for mode in ("optimizer_only", "two_optimizers", "both", "explicit_first"):
        recs, r, _ = run_scenario(shm_dir, f"MODE = {mode!r}\n" + textwrap.dedent(OPTIMIZER_LOOP))
        assert r.steps == 10, (mode, r.steps)  # one step per iteration, whichever source marks it
        assert [s["step"] for s in of(recs, "step")] == list(range(1, r.steps + 1)), mode


STEP_LOOPS = """
    import torch
    net = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    data = torch.utils.data.DataLoader(torch.randn(20, 4), batch_size=2) if LOADER else [torch.randn(2, 4)] * 10
    if MODE == "sanity":  # a sanity check's model calls before training (Lightning's, HF's eval_on_start)
        with torch.no_grad():
            for _ in range(5):
                net(torch.randn(2, 4))
    for x in data:
        if MODE == "eval":
            with torch.no_grad():
                net(x)
            continue
        net(x).sum().backward()
        opt.step()
        if MODE == "twice":
            opt.step()  # (the same optimizer stepped twice an iteration)
        opt.zero_grad()
"""


@pytest.mark.parametrize("mode, loader", [("sanity", False), ("twice", False), ("twice", True), ("eval", True)])
def test_steps_of_a_sanity_check_a_second_optimizer_step_and_an_eval_loop(shm_dir, mode, loader):
    """Issue 43 item 14: 5 model calls before the first optimizer.step() stayed in the count (15 for
    10), an optimizer stepped twice an iteration counted 20 for 10, a forward-only loop lost its last
    step (9 for 10). The count is the monitor's (its snapshot of the channel)."""
    from tuimon.monitor.training import TrainingView
    from tuimon.sources.channel import ChannelSource

    recs, r, _ = run_scenario(shm_dir, f"MODE, LOADER = {mode!r}, {loader}\n" + textwrap.dedent(STEP_LOOPS))
    view = TrainingView(ChannelSource(SegmentReader(r.path)))
    view.poll()
    snap = view.snapshot()
    assert snap.steps == 10, (mode, loader, r.steps, snap.step_source)
    assert snap.step_source == ("forward" if mode == "eval" else "optimizer")
    steps = of(recs, "step")
    assert [s["step"] for s in steps] == list(range(1, r.steps + 1))  # (numbered as ever: the count leaves some out)


def test_nvtx_annotations_show_up_without_code_change(shm_dir):
    recs, _, _ = run_scenario(shm_dir, """
        import nvtx
        with nvtx.annotate("ctx", color="red"):
            nvtx.push_range("pushed")
            nvtx.pop_range()
        @nvtx.annotate()
        def decorated():
            return 7
        @nvtx.annotate("named")
        def other():
            return 8
        assert decorated() == 7 and other() == 8
        from nvtx import annotate
        with annotate("imported-name"):
            pass
    """)
    names = [(x["name"], x["depth"]) for x in of(recs, "range")]
    assert names == [("pushed", 1), ("ctx", 0), ("decorated", 0), ("named", 0), ("imported-name", 0)]


def test_nvtx_imported_before_instrument_is_patched_too(shm_dir):
    p = run_python("""
import os, nvtx, tuimon
tuimon.instrument()
with nvtx.annotate("early"):
    pass
print(os.getpid())
""")
    assert p.returncode == 0, p.stderr
    r = SegmentReader(seg_path(shm_dir, int(p.stdout)))
    assert [r.name(x[3]) for x in r.drain().records] == ["early"]


def test_torch_cuda_nvtx_ranges_show_up(shm_dir):
    # This machine's torch has no CUDA: stand in for the CUDA NVTX library at its boundary
    # (torch.cuda.nvtx._nvtx). The GPU check runs the same code against the real one.
    recs, _, _ = run_scenario(shm_dir, """
        import torch.cuda.nvtx as tnvtx
        class FakeCudaNvtx:
            depth = 0
            def rangePushA(self, msg):
                self.depth += 1; return self.depth - 1
            def rangePop(self):
                self.depth -= 1; return self.depth
        tnvtx._nvtx = FakeCudaNvtx()
        assert tnvtx.range_push("fwd") == 0
        with tnvtx.range("layer{}", 3):
            pass
        assert tnvtx.range_pop() == 0
    """)
    assert [(x["name"], x["depth"]) for x in of(recs, "range")] == [("layer3", 1), ("fwd", 0)]


def test_torch_cuda_nvtx_failure_is_not_swallowed(shm_dir):
    recs, _, p = run_scenario(shm_dir, """
        import torch.cuda.nvtx as tnvtx
        class NoCudaNvtx:   # what a CPU build of torch has: every call raises
            def rangePushA(self, msg):
                raise RuntimeError("NVTX functions not installed")
        tnvtx._nvtx = NoCudaNvtx()
        try:
            tnvtx.range_push("x")   # raises as it would without tuimon, and records nothing
        except RuntimeError as e:
            print("raised", e)
        with tuimon.range("after"):
            pass
    """)
    assert "raised NVTX functions not installed" in p.stdout
    assert [(x["name"], x["depth"]) for x in of(recs, "range")] == [("after", 0)]


def test_dataloader_waits_and_forked_workers(shm_dir):
    recs, r, _ = run_scenario(shm_dir, """
        import torch
        from torch.utils.data import DataLoader, Dataset
        class Slow(Dataset):
            def __len__(self): return 12
            def __getitem__(self, i):
                with tuimon.range("in_worker"):      # must not reach the parent's ring
                    tuimon.count("worker_items", 1)
                    time.sleep(0.05)
                return torch.full((2,), float(i))
        net = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        loader = DataLoader(Slow(), batch_size=None, num_workers=2,
                            multiprocessing_context="fork")
        for x in loader:
            with tuimon.range("compute"):
                net(x).sum().backward()
                opt.step()
    """)
    assert of(recs, "range", "in_worker") == [] and of(recs, "count") == []
    assert {x["tid"] for x in recs} == {of(recs, "range", "compute")[0]["tid"]}
    steps = of(recs, "step")
    assert r.steps == len(steps) == 12
    waits = of(recs, "data_wait")
    assert len(waits) == 13  # 12 batches and the next() that ends the epoch
    by_step = {}
    for w in waits:
        by_step.setdefault(w["step"], []).append(w)
    for s in steps:  # each step's wait lies inside that step
        for w in by_step[s["step"]]:
            assert s["t0"] <= w["t0"] and w["t1"] <= s["t1"]
    assert sum(w["t1"] - w["t0"] for w in waits) / 1e9 > 0.1  # the loop did wait for batches


def test_instrument_is_idempotent_and_a_full_shm_disables_the_probe_quietly(shm_dir):
    recs, _, _ = run_scenario(shm_dir, """
        assert tuimon.instrument().path == st.path
    """)
    p = run_python("""
import errno, os
def no_space(fd, off, size):
    raise OSError(errno.ENOSPC, "No space left on device")
os.posix_fallocate = no_space
import tuimon
st = tuimon.instrument()
with tuimon.range("x"):
    tuimon.count("n", 1)
    tuimon.step()
print(st.enabled, st.reason)
""")
    assert p.returncode == 0
    assert p.stdout.startswith("False no space left in")
    assert "tuimon: probe disabled: no space left" in p.stderr


def test_bad_counts_are_dropped_not_raised(shm_dir):
    recs, _, p = run_scenario(shm_dir, """
        for bad in ("x", None, object()):
            tuimon.count("tokens", bad)
        tuimon.count("tokens", 5)
        print("went on")
    """)
    assert "went on" in p.stdout and "count() ignored" not in p.stderr  # (said in the channel: issue 43 item 23)
    assert len([x for x in of(recs, "gauge") if x["name"].startswith("probe.note:count() ignored")]) == 1
    assert [(x["name"], x["value"]) for x in of(recs, "count")] == [("tokens", 5.0)]


@pytest.mark.parametrize("pure", ["0", "1"], ids=["c", "python"])
def test_counts_of_every_kind_are_written_as_probe_count_would(shm_dir, monkeypatch, pure):
    """tuimon.count is channel.ring's (C where built): a str name and an int or float n written there,
    anything else through Probe.count (str() of the name, float() of n, a bad one dropped and said
    once); the record stamped with the step in progress and the thread's range depth."""
    monkeypatch.setenv("TUIMON_PURE_PYTHON", pure)
    recs, _, p = run_scenario(shm_dir, """
        import fractions
        with tuimon.range("outer"):
            tuimon.count("a")
            tuimon.count("a", 2.5)
        tuimon.count(7, 3)
        tuimon.count("a", True)
        tuimon.count("a", fractions.Fraction(1, 4))
        tuimon.count("big", 10 ** 400)
        tuimon.step()
        tuimon.count("a", 4)
        tuimon.count("b", -2)
    """)
    got = [(x["name"], x["value"], x["depth"], x["step"]) for x in of(recs, "count")]
    assert got == [("a", 1.0, 1, 1), ("a", 2.5, 1, 1), ("7", 3.0, 0, 1), ("a", 1.0, 0, 1), ("a", 0.25, 0, 1),
                   ("a", 4.0, 0, 2), ("b", -2.0, 0, 2)]
    said = [x["name"] for x in of(recs, "gauge") if x["name"].startswith("probe.note:count() ignored")]
    assert len(said) == 1 and "OverflowError" in said[0] and "count() ignored" not in p.stderr


def test_at_exit_no_thread_of_tuimon_is_left_in_the_job(shm_dir):
    """The probe's exit hook stops its control and sampler threads (the native one, and the Python
    one that reads its requests) and waits for them: a daemon thread inside a torch call when the
    interpreter finalizes is ended by pthread_exit, whose unwinding through C++ frames aborts the
    job (SIGABRT, 'terminate called without an active exception'), as a GPU job under `tuimon run`
    did at its end, and a CPU job that raised did once in CI."""
    p = run_python("""
import threading, time
import tuimon
from tuimon.probe import api, state
tuimon.instrument()
time.sleep(0.5)  # (the control thread in its loop)
names = lambda: sorted(t.name for t in threading.enumerate() if t.name.startswith("tuimon-"))
before = names()
api._at_exit(state.probe)
print(before, names())
""")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "['tuimon-control', 'tuimon-sampler'] []", p.stdout + p.stderr


@pytest.mark.skipif(not sampler.native, reason="the native sampler is not built here")
def test_at_exit_the_sampler_ends_while_a_forked_child_lives(shm_dir):
    """A forked child (a DataLoader worker) drops its copy of the sampler's pipe and its state:
    the parent's reader still reads its end of file at exit, and a pending call the child inherited
    samples nothing there."""
    p = run_python("""
import os, threading, time
import tuimon
from tuimon.channel import _fastring
from tuimon.probe import api, state
tuimon.instrument()
time.sleep(0.3)
said, say = os.pipe()
child = os.fork()
if child == 0:
    os.write(say, f"child {_fastring.sample_take()}".encode())  # (nothing: its copy of the samples was dropped)
    time.sleep(30)  # (longer than the exit waits for the reader)
    os._exit(0)
print(os.read(said, 200).decode())  # (the child has spoken before the parent exits)
api._at_exit(state.probe)  # (the reader's join would time out, the child holding the pipe open)
print("parent", [t.name for t in threading.enumerate() if t.name.startswith("tuimon-")])
os.kill(child, 9)
os.waitpid(child, 0)
""")
    assert p.returncode == 0, p.stderr
    lines = sorted(p.stdout.split("\n"))
    assert "child []" in lines and "parent []" in lines, p.stdout + p.stderr


DELETED_CWD = """
import os, tempfile, time, tuimon
tuimon.instrument()
d = tempfile.mkdtemp()
os.chdir(d)
os.rmdir(d)
print("up", flush=True)
end = time.monotonic() + 60
while time.monotonic() < end:
    time.sleep(0.01)
    tuimon.step()
"""

BROKEN_PART = """
import time, tuimon
from tuimon.probe import present

def boom(self):
    raise RuntimeError("boom")

present.Present.publish = boom
tuimon.instrument()
print("up", flush=True)
end = time.monotonic() + 60
while time.monotonic() < end:
    time.sleep(0.01)
    tuimon.step()
"""


@pytest.mark.parametrize("job_code", [DELETED_CWD, BROKEN_PART], ids=["cwd-deleted", "a-part-fails"])
def test_the_probe_writes_nothing_into_the_jobs_output(shm_dir, job_code):
    """Issue 43 item 23: with its working directory deleted, the job's stderr read "tuimon: the step in
    progress is not published: FileNotFoundError" (the probe named files relative to it). The step in
    progress is published all the same; and where a part of the probe does fail, it says so in the
    channel (the monitor shows it among the problems), never in the job's own output."""
    job = subprocess.Popen([sys.executable, "-c", job_code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "up"
        time.sleep(1.5)
        p = subprocess.run(tuimon_cmd("attach", job.pid, "--once", "--json"), capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        if job_code is DELETED_CWD:
            assert doc.get("now") and "probe" not in doc["problems"], doc
        else:
            assert doc["problems"]["probe"] == "the step in progress is not published: RuntimeError: boom", doc["problems"]
    finally:
        job.kill()
        _out, err = job.communicate(timeout=60)
    assert "tuimon" not in err, err
