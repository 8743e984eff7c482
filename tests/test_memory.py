"""GPU memory (issue 24) without a GPU: the memory pressure rule on gauges recorded through a real
channel as the probe writes them, an out-of-memory death with the allocator's last gauges, the
memory window's request through the control block, its summary on snapshots in torch's documented
format (read with torch's own _memory_viz code too), the whole capture path against a real CPU job
with a fake only where CPU torch has no allocator history, and the memory view."""

import json
import os
import pickle
import subprocess
import sys

import pytest

from tests.conftest import ROOT, seg_path, tuimon_cmd, wait_for
from tests.helpers.flat_evidence import flat_evidence as Evidence
from tuimon.analysis import memory as mem
from tuimon.analysis import thresholds as T
from tuimon.analysis.verdicts import diagnose
from tuimon.analysis.verdicts.exited import exited_words
from tuimon.capture import memory_summary
from tuimon.capture.client import CaptureClient
from tuimon.capture.summary import memory_lines
from tuimon.channel import SegmentReader, SegmentWriter
from tuimon.channel import layout as L
from tuimon.channel.control import KIND_MEMORY, KIND_SHIFT, ControlBlock, open_control
from tuimon.channel.fileview import MappedView
from tuimon.channel.meta import JobMeta
from tuimon.model import Cycle, JobEnd, Memory, ProcessSample, from_json, to_json
from tuimon.monitor.state import MonitorState
from tuimon.monitor.training import TrainingView
from tuimon.probe.core import _expandable_segments
from tuimon.sources.channel import ChannelSource

WORKLOAD = str(ROOT / "tests" / "workloads" / "memory.py")
PLANTED = str(ROOT / "tests" / "workloads" / "planted_wait.py")
TINY = ROOT / "tests" / "fixtures" / "memory_snapshot_tiny.pickle"
GIB, MIB, MS = 2**30, 2**20, 1_000_000
HOST = dict(steps=50, step_ms=40.0, data_share=0.01, phases={"forward": 0.3, "backward": 0.3, "optimizer": 0.05,
                                                                "other": 0.35}, sync_share=0.0, sync_per_step=0.0)


# -- gauges through a real channel, as the probe writes them ---------------------------------------


def loop_with_gauges(steps, step_ms, retried, cap=8 * GIB, peak=6 * GIB, ooms_at=(), expandable=False,
                     read_every_ms=500):
    """A segment holding `steps` steps of step_ms, and the allocator's gauges read every
    read_every_ms by a control thread (probe/core.py's names and record layout): retried(k) ->
    the retries step k made. Returns (the view's snapshot, the truth: retries after each step)."""
    w = SegmentWriter.create(JobMeta(argv=("train.py",)), 1 << 14)
    names = {n: w.intern(n) for n in ("cuda.allocated", "cuda.reserved", "cuda.peak_allocated", "cuda.alloc_retries",
                                      "cuda.ooms", "cuda.inactive_split", "cuda.total", "cuda.limit",
                                      "cuda.expandable_segments")}
    total, done, ooms, next_read = 0, [], 0, read_every_ms
    for k in range(1, steps + 1):
        t0, t1 = (k - 1) * step_ms, k * step_ms
        while next_read <= t1:  # a read during step k: what the steps before it did, and part of k's
            part = retried(k) * (next_read - t0) / step_ms
            for name, v in (("cuda.allocated", peak // 2), ("cuda.reserved", cap - GIB), ("cuda.peak_allocated", peak),
                            ("cuda.alloc_retries", int(total + part)), ("cuda.ooms", ooms),
                            ("cuda.inactive_split", 512 * MIB), ("cuda.total", 80 * GIB), ("cuda.limit", cap),
                            ("cuda.expandable_segments", int(expandable))):
                w.emit(L.GAUGE, 0, names[name], 2, k, 0, next_read * MS, float(v))
            next_read += read_every_ms
        total += retried(k)
        ooms += k in ooms_at
        done.append(total)
        w.emit(L.STEP, 0, 0, 1, k, t0 * MS, t1 * MS, 0.0)
    view = TrainingView(ChannelSource(SegmentReader(w.path)))
    view.poll()
    return view.snapshot(), done


def verdict(snapshot, **evidence):
    state = MonitorState()
    state.apply(Cycle(t=1, process=ProcessSample(pid=os.getpid()), training=snapshot))
    return state.view().verdict


def truth_rate(done, m):
    """The loop's own retries per step over the steps the monitor's reads spanned."""
    return (done[m.retries_to - 2] - done[m.retries_from - 2]) / (m.retries_to - m.retries_from)


def test_retries_every_few_steps_are_memory_pressure_at_the_loop_s_own_rate(shm_dir):
    snap, done = loop_with_gauges(300, 40, lambda k: 1 if k % 5 == 0 else 0, peak=7 * GIB)  # 0.2 per step
    m = snap.memory
    assert m.limit == 8 * GIB and m.total == 80 * GIB and m.capacity == 8 * GIB
    assert m.retries_per_step == pytest.approx(truth_rate(done, m), rel=0.10)
    assert m.retries_to - m.retries_from >= 80  # (within the step window, the last 100 steps: a read every 12.5)
    v = verdict(snap)
    assert (v.code, v.headline) == ("memory-pressure", "memory pressure: the allocator retries")
    assert v.evidence.startswith(f"{m.retries_per_step:.2f} allocator retries per step (steps {m.retries_from}.."
                                 f"{m.retries_to}) · peak 7.0 GiB of the cap of 8.0 GiB (88%) · reserved 7.0 GiB")
    # below 90% of the cap: the memory was there in blocks of the wrong sizes
    assert v.next_step.startswith("the live tensors peak at 88% of the cap of 8.0 GiB: the memory is there")
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in v.next_step
    assert "waits for the GPU to finish everything queued" in v.next_step


def test_a_full_memory_is_told_to_hold_fewer_bytes(shm_dir):
    snap, _ = loop_with_gauges(300, 40, lambda k: 1, peak=int(7.8 * GIB))
    v = verdict(snap)
    assert v.code == "memory-pressure" and v.confidence == "high"
    assert v.next_step.startswith("the live tensors fill 97% of the cap of 8.0 GiB: smaller batches, activation "
                                  "checkpointing")
    snap, _ = loop_with_gauges(300, 40, lambda k: 1, peak=6 * GIB, expandable=True)
    v = verdict(snap)
    assert v.next_step.startswith("live tensors need more than the allocator has, with expandable segments already on")


@pytest.mark.parametrize("retried, why", [
    (lambda k: 0, "no retries (the same loop with expandable segments)"),
    (lambda k: 1 if k == 250 else 0, "one retry: a one-off larger batch"),
    (lambda k: 1 if k % 25 == 0 else 0, "one in 25 steps, under one in 20"),
])
def test_rare_retries_name_nothing(shm_dir, retried, why):
    snap, done = loop_with_gauges(300, 40, retried)
    m = snap.memory  # (a read in a step holds the part of its retries done by then: one retry either end)
    assert m.retries_per_step == pytest.approx(truth_rate(done, m), abs=1.01 / (m.retries_to - m.retries_from)), why
    rule = next(r for r in verdict(snap).rules if r.code == "memory-pressure")
    assert not rule.fired, why


def test_the_threshold_is_where_its_source_puts_it():
    def at(rate):
        return diagnose(Evidence(**HOST, memory=Memory(allocated=GIB, reserved=2 * GIB, peak_allocated=3 * GIB, alloc_retries=10, ooms=0, retries_per_step=rate,
                                                       retries_from=100, retries_to=200))).code
    assert at(T.MEMORY_RETRIES.value) == "memory-pressure"
    assert at(T.MEMORY_RETRIES.value - 0.001) != "memory-pressure"
    caught = Memory(allocated=GIB, reserved=2 * GIB, peak_allocated=3 * GIB, alloc_retries=0, ooms=2, retries_per_step=0.0, retries_from=1, retries_to=90, ooms_in_window=2)
    assert diagnose(Evidence(**HOST, memory=caught)).code == "memory-pressure"  # a job that catches OOMs and goes on
    # it comes before the classes it hides behind (here: input-bound)
    assert diagnose(Evidence(**{**HOST, "data_share": 0.5}, memory=Memory(
        allocated=GIB, reserved=2 * GIB, peak_allocated=3 * GIB, alloc_retries=9, ooms=0, retries_per_step=0.5, retries_from=1, retries_to=99))).code == "memory-pressure"


def test_a_counter_reset_and_a_window_without_two_reads():
    reads = [(0, 10, 100.0), (1, 20, 102.0), (2, 30, 1.0), (3, 40, 4.0)]  # reset_accumulated_memory_stats at 30
    assert mem.increase(reads, 10, 40) == (6.0, 10, 40)
    assert mem.increase(reads, 35, 40) == (None, 0, 0)
    assert mem.increase([(0, 5, 1.0), (1, 5, 3.0)], 1, 10) == (None, 0, 0)  # two reads in one step span none


def test_the_forecast_line_and_its_threshold():
    assert mem.forecast(Memory(allocated=GIB, reserved=2 * GIB, peak_allocated=int(72.0 * GIB), total=int(79.6 * GIB))) == "peak 72.0 of 79.6 GiB: 10% left"
    assert mem.forecast(Memory(allocated=GIB, reserved=2 * GIB, peak_allocated=int(71.2 * GIB), total=int(79.6 * GIB))) is None  # 89%: under the bar
    assert mem.forecast(Memory(allocated=GIB, reserved=2 * GIB, peak_allocated=int(7.5 * GIB), total=80 * GIB, limit=8 * GIB)) == \
        "peak 7.5 of the cap of 8.0 GiB: 6% left"
    assert mem.forecast(Memory(allocated=GIB, reserved=2 * GIB, peak_allocated=int(0.89 * 80 * GIB), total=80 * GIB)) is None
    assert mem.forecast(Memory(allocated=GIB, reserved=2 * GIB, peak_allocated=3 * GIB)) is None  # (no total: a probe without it)


def test_expandable_segments_are_read_from_the_job_s_allocator_settings(monkeypatch):
    for conf, on in (("expandable_segments:True", True), ("max_split_size_mb:128,expandable_segments:True", True),
                     ("expandable_segments:False", False), ("", False), ("garbage", False)):
        monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", conf)
        assert _expandable_segments() is on, conf


def test_memory_goes_to_json_and_back():
    m = Memory(allocated=GIB, reserved=2 * GIB, peak_allocated=3 * GIB, alloc_retries=12, ooms=1, inactive_split=MIB, peak_reserved=4 * GIB, total=80 * GIB, limit=8 * GIB,
               retries_per_step=0.21, retries_from=10, retries_to=110, ooms_in_window=1, expandable=False)
    assert from_json(Memory, json.loads(json.dumps(to_json(m)))) == m
    old = {"allocated": 1, "reserved": 2, "peak_allocated": 3, "alloc_retries": 0, "ooms": 0}  # a recording's
    assert from_json(Memory, old).retries_per_step is None


# -- a job that died of OOM ------------------------------------------------------------------------

FRAGMENTED = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
              "79.19 GiB of which 1.07 GiB is free. Including non-PyTorch memory, this process has 78.10 GiB memory "
              "in use. Of the allocated memory 73.50 GiB is allocated by PyTorch, and 3.96 GiB is reserved by PyTorch "
              "but unallocated. If reserved but unallocated memory is large try setting "
              "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")
FULL = FRAGMENTED.replace("3.96 GiB is reserved", "20.00 MiB is reserved")


def test_an_oom_death_shows_the_last_gauges_and_the_fix_its_numbers_point_to():
    last = Memory(allocated=int(73.4 * GIB), reserved=int(77.5 * GIB), peak_allocated=int(75.2 * GIB), alloc_retries=37, ooms=1, total=int(79.19 * GIB))
    end = JobEnd(how="exception", headline="exited with code 1: " + FRAGMENTED[:80], exit_code=1, exception=FRAGMENTED)
    headline, evidence, step = exited_words(end, last)
    assert headline == "exited (code 1): torch.OutOfMemoryError"
    assert ("GPU memory last read: allocated 73.4 GiB, reserved 77.5 GiB, peak 75.2 GiB of 79.2 GiB (95%); 37 allocator "
            "retries, 1 out-of-memory errors in all") in evidence
    assert step.startswith("the GPU ran out of memory asking for 2.0 GiB while 4.0 GiB was reserved but unallocated: "
                           "fragmentation: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    _, _, step = exited_words(JobEnd(how="exception", headline="", exception=FULL), last)
    assert step.startswith("the GPU ran out of memory asking for 2.0 GiB (1.1 GiB free on the device): the live "
                           "tensors fill it: a smaller batch")
    assert mem.oom_numbers(FRAGMENTED) == {"asked": 2 * GIB, "capacity": int(79.19 * GIB), "free": int(1.07 * GIB),
                                           "allocated": int(73.5 * GIB), "unallocated": int(3.96 * GIB)}


def test_a_worker_dying_mid_batch_is_read_as_a_dead_worker_only_inside_the_dataloader():
    """A bare EOFError (seen on CI when a worker was killed) or a reset socket, raised inside torch's DataLoader,
    is a worker that died handing over a batch; the same error raised by the job's own code is not."""
    loader = ["at train.py:40 in main", "at torch/utils/data/dataloader.py:1327 in _next_data",
              "at multiprocessing/connection.py:430 in _recv_bytes"]
    for ex in ("EOFError", "ConnectionResetError: [Errno 104] Connection reset by peer"):
        _, _, step = exited_words(JobEnd(how="exception", headline="", exit_code=1, exception=ex, frames=loader), None)
        assert step.startswith("a DataLoader worker died"), (ex, step)
    _, _, step = exited_words(JobEnd(how="exception", headline="", exit_code=1, exception="EOFError",
                                     frames=["at train.py:12 in read_config"]), None)
    assert step.startswith("the exception above ended it"), step


# -- the memory window's request --------------------------------------------------------------------


def test_a_memory_request_keeps_the_layout_and_an_older_probe_refuses_it(shm_dir):
    w = SegmentWriter.create(JobMeta(argv=("train.py",)), 256)
    ctl = ControlBlock(MappedView(w._mm, L.CONTROL_OFFSET))
    ctl.write_request(1, L.CAPTURE_STEPS, steps=5, kind=KIND_MEMORY)
    req = ctl.read_request()
    assert (req.seq, req.base_mode, req.kind, req.steps) == (1, L.CAPTURE_STEPS, KIND_MEMORY, 5)
    assert req.mode == L.CAPTURE_STEPS | KIND_MEMORY << KIND_SHIFT
    assert req.mode not in (L.CAPTURE_STEPS, L.CAPTURE_SECONDS)  # what a probe before it checks: "unknown mode"
    ctl.write_request(2, L.CAPTURE_SECONDS, seconds=3.0)
    assert (ctl.read_request().kind, ctl.read_request().base_mode) == (0, L.CAPTURE_SECONDS)


# -- the snapshot's summary -------------------------------------------------------------------------

TORCH_FRAME = {"filename": "/usr/lib/python3.12/site-packages/torch/nn/modules/linear.py", "line": 125,
               "name": "forward"}


def frames(line, name="forward"):
    return [TORCH_FRAME, {"filename": "/home/u/train.py", "line": line, "name": name},
            {"filename": "/home/u/train.py", "line": 90, "name": "main"}]


def tiny_snapshot():
    """torch.cuda.memory._snapshot()'s format (torch/cuda/memory.py): the parameters (4 MiB) and an
    old activation (2 MiB, freed in the window) live when it opened; step 1 allocates 8 + 1 MiB and
    frees them; step 2 allocates 16 MiB at train.py:20 and 3 MiB at train.py:22, frees the 3: the
    peak, 23 MiB, is at that last alloc."""
    a0, a1, b, c, d = 0x7F0000000000, 0x7F0000400000, 0x7F0001000000, 0x7F0002000000, 0x7F0003000000
    ev = []

    def add(action, addr, size, f=()):
        ev.append({"action": action, "addr": addr, "size": size, "stream": 0, "frames": list(f), "time_us": len(ev)})

    add("free_requested", a1, 2 * MIB)
    add("free_completed", a1, 2 * MIB)
    add("segment_alloc", b, 20 * MIB, frames(20))
    add("alloc", b, 8 * MIB, frames(20))
    add("alloc", c, 1 * MIB, frames(21))
    for addr, size in ((b, 8 * MIB), (c, MIB)):
        add("free_requested", addr, size)
        add("free_completed", addr, size)
    add("alloc", b, 16 * MIB, frames(20))
    add("alloc", d, 3 * MIB, frames(22))
    add("free_requested", d, 3 * MIB)
    add("free_completed", d, 3 * MIB)

    def block(addr, size, state, f=()):
        return {"address": addr, "size": size, "requested_size": size, "state": state, "frames": list(f)}

    def segment(addr, blocks):
        size = sum(x["size"] for x in blocks)
        active = sum(x["size"] for x in blocks if x["state"] == "active_allocated")
        return {"device": 0, "address": addr, "total_size": size, "stream": 0, "segment_type": "large",
                "segment_pool_id": (0, 0), "allocated_size": active, "active_size": active, "requested_size": active,
                "blocks": blocks}

    return {"segments": [segment(a0, [block(a0, 4 * MIB, "active_allocated"), block(a1, 2 * MIB, "inactive")]),
                         segment(b, [block(b, 16 * MIB, "active_allocated", frames(20)),
                                     block(b + 16 * MIB, 4 * MIB, "inactive")]),
                         segment(d, [block(d, 3 * MIB, "inactive")])],
            "device_traces": [ev]}


def test_the_summary_finds_the_peak_and_what_was_live_at_it():
    s = memory_summary.summarize(tiny_snapshot())
    assert (s["peak"], s["at_start"], s["at_end"]) == (23 * MIB, 6 * MIB, 20 * MIB)
    assert s["peak_at"] == 10 and s["allocs"] == 4 and s["reserved_end"] == 29 * MIB and s["segments"] == 3
    assert [(g["where"], g["bytes"], g["count"]) for g in s["groups"]] == [
        ("train.py:20 in forward", 16 * MIB, 1), ("allocated before the window", 4 * MIB, 1),
        ("train.py:22 in forward", 3 * MIB, 1)]  # (torch's own frames are not where it was made)
    assert s["groups"][0]["stack"] == ["train.py:20 in forward", "train.py:90 in main"]
    lines = memory_lines(s)
    assert lines[0] == "peak 23 MiB live at event 11 of 13 (6 MiB live when the window opened; 4 allocations in it)"
    assert lines[2].split() == ["16", "MiB", "1x", "largest", "16", "MiB", "train.py:20", "in", "forward"]


def test_the_fixture_is_the_documented_format_and_torch_s_own_viewer_code_reads_it():
    """The committed fixture is tiny_snapshot() pickled as torch's _dump_snapshot does; the
    memory viewer's Python side (torch.cuda._memory_viz) reads it and its accounting holds."""
    viz = pytest.importorskip("torch.cuda._memory_viz")
    assert memory_summary.load(str(TINY)) == tiny_snapshot()
    with open(TINY, "rb") as f:
        data = pickle.load(f)
    assert "total_reserved: 29.0MiB" in viz.segsum(data)
    assert "TOTAL MEM" in viz.trace(data)
    assert "snapshot.pickle" in viz.trace_plot(data)  # the viewer's page, with the snapshot in it


def test_an_allocation_without_python_frames_is_not_called_older_than_the_window():
    snap = tiny_snapshot()  # (autograd's backward allocates on its own thread: no Python frames)
    snap["device_traces"][0].insert(10, {"action": "alloc", "addr": 0x7F0004000000, "size": 64 * MIB, "stream": 0,
                                         "frames": []})
    s = memory_summary.summarize(snap)
    assert s["groups"][0]["where"] == "no Python stack (backward on autograd's thread, or C++)"
    assert s["peak"] == 87 * MIB and s["at_start"] == 6 * MIB


def test_a_peak_the_window_repeats_is_named_by_the_lines_it_saw():
    """A step's peak comes back every step: when the window's equals the one it opened on, the
    later one is shown, whose allocations the window saw made."""
    snap = tiny_snapshot()
    snap["device_traces"][0] = [
        {"action": "free_completed", "addr": 0x7F0000400000, "size": 8 * MIB, "stream": 0, "frames": []},
        {"action": "alloc", "addr": 0x7F0000400000, "size": 8 * MIB, "stream": 0, "frames": frames(30)}]
    s = memory_summary.summarize(snap)
    assert (s["peak"], s["peak_at"]) == (s["at_start"], 1)
    assert ("train.py:30 in forward", 8 * MIB) in [(g["where"], g["bytes"]) for g in s["groups"]]


def test_an_oom_in_the_window_is_said():
    snap = tiny_snapshot()
    snap["device_traces"][0].append({"action": "oom", "size": 5 * GIB, "device_free": 300 * MIB, "stream": 0,
                                     "frames": frames(40)})
    assert "out of memory in the window: 5.0 GiB asked for, 300 MiB free on the device" in \
        memory_lines(memory_summary.summarize(snap))


def test_a_file_that_is_not_a_plain_snapshot_is_not_read(tmp_path):
    class Boom:
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    bad = tmp_path / "evil.pickle"
    bad.write_bytes(pickle.dumps({"segments": [], "device_traces": [], "x": Boom()}))
    with pytest.raises(memory_summary.NotASnapshot, match="an object of posix.system"):
        memory_summary.load(str(bad))
    assert not (tmp_path / "pwned").exists()
    cut = tmp_path / "cut.pickle"
    cut.write_bytes(TINY.read_bytes()[:100])
    with pytest.raises(memory_summary.NotASnapshot, match="not a pickle"):
        memory_summary.load(str(cut))
    with pytest.raises(memory_summary.NotASnapshot, match="more than the 0 MiB read at most"):
        memory_summary.load(str(TINY), max_bytes=10)
    other = tmp_path / "other.pickle"
    other.write_bytes(pickle.dumps([1, 2, 3]))
    p = subprocess.run([sys.executable, "-m", "tuimon.capture.memory_summary", str(other)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1 and "not a memory snapshot" in p.stderr and not p.stdout


# -- the capture path against a real job -----------------------------------------------------------


@pytest.fixture(autouse=True)
def capture_dir(tmp_path, monkeypatch):
    d = tmp_path / "captures"
    monkeypatch.setenv("TUIMON_CAPTURE_DIR", str(d))
    return d


def start(*args):
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, *map(str, args)),
                           stdout=subprocess.PIPE, text=True)
    assert job.stdout.readline().strip() in ("training", "up")
    return job


def test_tuimon_capture_memory_against_a_job_whose_allocator_history_is_faked(shm_dir, capture_dir, tmp_path):
    """A real CPU training loop under tuimon run; CPU torch has no allocator history, so the job
    fakes torch.cuda.memory's recorder and snapshot from its layers' outputs (their real stacks).
    The probe turns recording on at a step boundary, off after the snapshot, N steps later."""
    truth_file = str(tmp_path / "truth.json")
    job = start(WORKLOAD, "fake", "--seconds", 120, "--truth", truth_file)
    try:
        wait_for(lambda: os.path.exists(seg_path(shm_dir, job.pid)), 30, "the job's channel")
        p = subprocess.run(tuimon_cmd("capture", job.pid, "--memory", "--steps", 3, "--wait", "--json"),
                           capture_output=True, text=True, timeout=180)
        assert p.returncode == 0, p.stderr
        st = json.loads(p.stdout)
        assert st["kind"] == "memory" and st["state"] == "done" and st["last_step"] - st["first_step"] + 1 == 3
        assert st["message"].startswith("memory snapshot ") and "allocator events" in st["message"]
        truth = json.load(open(truth_file))
        on, off = truth["recorder_calls"]
        assert on == {"enabled": "all", "context": "alloc", "stacks": "python", "max_entries": 100_000,
                      "clear_history": True, "step": on["step"]}
        assert off["enabled"] is None and off["step"] >= on["step"] + 3  # (off after the snapshot, 3 steps on)
        lines = st["summary"]["lines"]
        top = lines[lines.index("largest live allocations at the peak, by the line that made them:") + 1]
        assert top.endswith(f"memory.py:{truth['largest']['line']} in fake"), lines  # the largest layer output
        assert top.split()[:6] == [f"{truth['largest']['bytes'] / MIB:.0f}", "MiB", "1x", "largest",
                                   f"{truth['largest']['bytes'] / MIB:.0f}", "MiB"]
        path = st["summary"]["file"]
        assert os.path.dirname(path) == str(capture_dir) and path.endswith(".memory.pickle")
        viz = pytest.importorskip("torch.cuda._memory_viz")
        with open(path, "rb") as f:
            assert "segments: " in viz.segsum(pickle.load(f))  # the viewer's own code reads what the probe wrote
        assert job.poll() is None  # the job goes on
    finally:
        job.kill()
        job.wait(30)


def test_a_memory_window_in_a_job_without_cuda_says_why(shm_dir):
    job = start(PLANTED, 2000, 0.02, 0.004)
    try:
        r = SegmentReader(seg_path(shm_dir, job.pid))
        client = CaptureClient(r.path, r.info.pid, r.info.start_ticks)
        seq = client.request(steps=2, kind=KIND_MEMORY)
        st = client.wait(seq, 60)
        assert st.state == "failed" and st.kind == "memory"
        assert st.message == ("could not start the memory window: RuntimeError: the job has not used CUDA (yet): the "
                              "allocator's history is a CUDA job's")
        seq = client.request(steps=2)  # the next window, of the probe's own kind, still works
        assert client.wait(seq, 120).state == "done"
        client.close()
        ctl, view = open_control(r.path)
        assert ctl.read_state().kind == 2  # torch.profiler
        view.close()
        assert job.poll() is None
    finally:
        job.kill()
        job.wait(30)


# -- the memory view -------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_M_takes_a_memory_capture_and_m_shows_what_it_found(shm_dir, tmp_path):
    import time

    from tests.fake_nvml import FakeNvml
    from tests.test_ui import settle, text
    from tuimon.monitor.session import LiveSession
    from tuimon.sources.nvml import DeviceSampler
    from tuimon.ui.app import make_app
    from tuimon.ui.screens import MemoryScreen

    truth_file = str(tmp_path / "truth.json")
    job = start(WORKLOAD, "fake", "--seconds", 120, "--truth", truth_file)
    try:
        fake = FakeNvml()
        fake.fail["nvmlInit"] = 12
        app = make_app(LiveSession(job.pid, 0.2, devices=DeviceSampler(fake)), "test")
        async with app.run_test(size=(120, 40)) as pilot:
            end = time.monotonic() + 30
            while time.monotonic() < end and not (app.state.training and app.state.training.steps > 3):
                await pilot.pause(0.05)
            await pilot.press("M")
            await pilot.press("m")
            await settle(app, pilot)
            assert isinstance(app.screen, MemoryScreen)
            assert "the job has not used CUDA (yet)" in text(app, "#memory")  # (its gauges: a CPU job has none)
            end = time.monotonic() + 90  # the window, the snapshot, then the summary's own process
            while time.monotonic() < end and "largest live allocations" not in text(app, "#memory-capture"):
                await pilot.pause(0.1)
            shown = text(app, "#memory-capture")
            line = json.load(open(truth_file))["largest"]["line"]
            assert "memory capture 1 done  steps " in shown and ".memory.pickle" in shown, shown
            assert f"memory.py:{line} in fake" in shown and "pytorch.org/memory_viz" in shown, shown
            await pilot.press("c")  # here c takes another memory window
            end = time.monotonic() + 30
            while time.monotonic() < end and "memory capture 2" not in text(app, "#memory-capture"):
                await pilot.pause(0.1)
            assert "memory capture 2" in text(app, "#memory-capture")
            await pilot.press("escape")
            await settle(app, pilot)
            assert not isinstance(app.screen, MemoryScreen)
    finally:
        job.kill()
        job.wait(30)


def test_the_memory_panel_of_a_job_under_pressure(shm_dir):
    from tuimon.ui.panels.memory import memory_panel

    snap, _ = loop_with_gauges(300, 40, lambda k: 1 if k % 4 == 0 else 0, peak=int(7.4 * GIB))
    state = MonitorState()
    for t in range(1, 4):
        state.apply(Cycle(t=t, process=ProcessSample(pid=os.getpid()), training=snap))
    shown = memory_panel(state.view(), 100).plain.splitlines()
    assert shown[0].startswith("allocated ") and shown[0].endswith("3.7 GiB") and "▄▄▄" in shown[0]
    assert shown[4] == "a column is a cycle; the bars' top is the largest shown, 7.4 GiB, of the cap of 8.0 GiB the job set"
    assert "peak 7.4 of the cap of 8.0 GiB: 8% left" in shown
    assert shown[6].startswith("allocator retries (its cache freed, cudaMalloc again): 0.2") and "75 in all" in shown[6]
    assert "reserved but unallocated 3.3 GiB, 512 MiB of it in split blocks not in use" in shown


def test_memory_pressure_in_the_prometheus_series(shm_dir):
    from tuimon.export.metrics import families

    snap, _ = loop_with_gauges(300, 40, lambda k: 1 if k % 4 == 0 else 0)
    state = MonitorState()
    state.apply(Cycle(t=1, process=ProcessSample(pid=os.getpid()), training=snap))
    got = {(s.name, *sorted(s.labels.items())): s.value for fam in families(state.view()) for s in fam.samples}
    job = (("pid", str(snap.pid)), ("rank", ""))
    assert got[("tuimon_torch_alloc_retries_per_step", *job)] == snap.memory.retries_per_step > 0.2
    assert got[("tuimon_torch_memory_capacity_bytes", *job)] == 8 * GIB
    assert got[("tuimon_torch_inactive_split_bytes", *job)] == 512 * MIB
    assert got[("tuimon_verdict", *job[:1], ("rank", ""), ("verdict", "memory-pressure"))] == 1


def test_a_job_that_dies_of_oom_inside_a_memory_window_writes_it_and_keeps_its_exit_code(shm_dir, capture_dir,
                                                                                          tmp_path):
    """The window closes at exit (the probe's atexit hook, before torch's): the snapshot is taken
    and written on the exiting thread, and the job still exits with its own code."""
    job = start(WORKLOAD, "fake", "--seconds", 120, "--die-in-window", 3, "--truth", str(tmp_path / "truth.json"))
    try:
        r = SegmentReader(seg_path(shm_dir, job.pid))
        client = CaptureClient(r.path, r.info.pid, r.info.start_ticks)
        st = client.wait(client.request(steps=50, kind=KIND_MEMORY), 120)
        assert job.wait(60) == 1
        assert st.state == "done" and st.kind == "memory", st
        assert st.message.startswith("the job ended inside the window at step ") and "(asked: 50 steps)" in st.message
        s = memory_summary.summarize(memory_summary.load(st.path))
        assert s["allocs"] >= 4 and s["groups"][0]["where"].startswith("memory.py:")
    finally:
        job.kill()
        job.wait(30)


def test_memory_pressure_in_the_once_json(shm_dir):
    from tuimon.monitor.report import view_json

    snap, _ = loop_with_gauges(300, 40, lambda k: 1 if k % 4 == 0 else 0, peak=int(7.4 * GIB))
    state = MonitorState()
    state.apply(Cycle(t=1, process=ProcessSample(pid=os.getpid()), training=snap))
    doc = json.loads(json.dumps(view_json(state.view())))
    assert doc["verdict"]["code"] == "memory-pressure"
    assert doc["memory"]["retries_per_step"] == snap.memory.retries_per_step and doc["memory"]["limit"] == 8 * GIB
    assert doc["memory"]["forecast"] == "peak 7.4 of the cap of 8.0 GiB: 8% left"
    assert doc["memory"]["peak_share"] == pytest.approx(7.4 / 8, abs=1e-3)
