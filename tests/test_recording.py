"""Recordings: written, read back through the replay path, and the committed real-GPU one."""

import json
import os
import threading

import pytest

from tests.conftest import ROOT
from tests.fake_nvml import FakeNvml
from tuimon.model import NA, CaptureStatus, CaptureSummary, Cycle, TrainingSnapshot, from_json, num, to_json
from tuimon.sources.nvml import DeviceSampler
from tuimon.sources.poller import Poller
from tuimon.sources.process import ProcessSampler
from tuimon.sources.recording import Recorder, Recording, RecordingError, ReplaySource

FIXTURE = ROOT / "tests" / "fixtures" / "h200_demo.jsonl"
HEADER_V1 = json.dumps({"format": "tuimon-recording", "version": 1}) + "\n"


def test_record_and_replay_give_the_same_cycles(tmp_path):
    """Every entry the TUI gets goes into a recording and comes back equal: samples, the training
    snapshot, capture states with their summaries, failures, notes."""
    path = str(tmp_path / "r.jsonl")
    gpus, procs = DeviceSampler(FakeNvml()), ProcessSampler(os.getpid())
    rec = Recorder(path, note="test")
    live = []
    for k in range(3):
        capture = CaptureStatus(seq=k, state="done", kind="torch.profiler", first_step=3, last_step=7,
                                message="trace 1.0 MB", path="/x/trace.json.gz", updated_ns=5,
                                summary=CaptureSummary(state="done", file="/x/trace.json.gz", size=1000,
                                                       lines=["top kernels:", "  1.0 ms  gemm"]))
        c = Cycle(t=1_000_000_000 * (k + 1), process=procs.sample(), gpus=gpus.sample(),
                  training=TrainingSnapshot(pid=7, steps=k, argv=["x"]),
                  capture=capture, channel="/dev/shm/tuimon-0-7",
                  problems={"channel": "shrank"} if k == 1 else {}, gpu_note="hint")
        rec.record(c)
        live.append(c)
    rec.close()
    replayed = []
    n = ReplaySource(path, speed=0).run(replayed.append)
    assert n == 3 and replayed == live
    assert replayed[0].gpus[0].sm_active == NA("first sample")  # unavailable stays unavailable
    assert replayed[1].problems == {"channel": "shrank"} and replayed[2].capture.summary.lines[1] == "  1.0 ms  gemm"


def test_replay_is_paced_and_stoppable(tmp_path):
    path = str(tmp_path / "r.jsonl")
    rec = Recorder(path)
    for i in range(5):
        rec.record(Cycle(t=1 + i * 1_000_000_000, training=TrainingSnapshot(pid=1, steps=i)))
    rec.close()
    stop, got = threading.Event(), []
    src = ReplaySource(path, speed=20.0)  # 4 s of recording in 0.2 s

    def on(c):
        got.append(c.training.steps)
        if c.training.steps == 2:
            stop.set()

    src.run(on, stop)
    assert got == [0, 1, 2]


def test_bad_recordings(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text("not json\n")
    with pytest.raises(RecordingError, match="not a tuimon recording"):
        Recording(str(p))
    p.write_text("")
    with pytest.raises(RecordingError, match="not a tuimon recording"):
        Recording(str(p))
    p.write_text(json.dumps({"format": "tuimon-recording", "version": 9}) + "\n")
    with pytest.raises(RecordingError, match="format v9; this tuimon reads v1 to v2"):
        Recording(str(p))
    p.write_text(HEADER_V1 + "{broken\n" + json.dumps({"t": 1, "source": "gpu", "data": []}) + "\n"
                 + json.dumps({"t": "x"}) + "\n" + json.dumps({"t": 2, "source": "process", "data": {"x": 1}}) + "\n")
    r = Recording(str(p))
    assert [c.gpus for c in r.cycles()] == [[]] and r.skipped == 3  # not JSON, no time, no pid
    # v2: a line of the wrong shape is skipped and counted; a wrong value becomes NA, not a crash
    good = to_json(Cycle(t=5, training=TrainingSnapshot(pid=3, steps=4)))
    odd = json.loads(json.dumps(good))
    odd["training"]["steps_per_s"] = "fast"
    odd["gpus"] = [{"index": 0, "power_w": "hot", "sm_active": {"na": "first sample"}}]
    p.write_text(json.dumps({"format": "tuimon-recording", "version": 2}) + "\n" + json.dumps(good) + "\n[1]\n"
                 + json.dumps({"t": 9, "training": {"steps": 1}}) + "\n" + json.dumps(odd) + "\n")
    r = Recording(str(p))
    cycles = list(r.cycles())
    assert r.skipped == 2 and cycles[0] == from_json(Cycle, good)
    assert cycles[1].training.steps_per_s is None and cycles[1].gpus[0].power_w == NA("not a valid value: hot")


def test_v1_entries_are_grouped_into_cycles(tmp_path):
    lines = [{"t": t, "source": src, "data": data} for t, src, data in [
        (10, "process", {"pid": 1}), (12, "gpu", []), (15, "training", {"pid": 1, "steps": 1}),
        (1_000_000_010, "process", {"pid": 1}), (1_000_000_020, "gpu", []),  # no training this cycle
        (2_000_000_000, "process", {"pid": 1, "alive": False})]]
    p = tmp_path / "v1.jsonl"
    p.write_text(HEADER_V1 + "".join(json.dumps(x) + "\n" for x in lines))
    cycles = list(Recording(str(p)).cycles())
    assert [c.t for c in cycles] == [10, 1_000_000_010, 2_000_000_000]
    assert cycles[0].training.steps == 1 and cycles[1].training is None and cycles[2].process.alive is False


def test_the_committed_real_gpu_recording():
    r = Recording(str(FIXTURE))
    cycles = list(r.cycles())
    assert "H200" in r.header["note"] and r.version == 1 and r.skipped == 0
    gpu = [c.gpus[0] for c in cycles]
    assert len(cycles) == 36 and all(c.training and c.process for c in cycles)
    busy = [g for g in gpu[2:] if num(g.sm_active) is not None]
    assert busy and all(g.gpm and g.name == "NVIDIA H200" for g in busy)
    assert max(g.sm_active for g in busy) > 10 and all(g.uses_target for g in busy)
    assert cycles[-1].training.steps > 100 and cycles[-1].training.ranges
    assert len(cycles[-1].process.procs) >= 3  # the job and its two DataLoader workers


def test_poller_runs_one_poll_at_a_time_and_survives_errors():
    calls, results = [], []
    lock = threading.Lock()

    def poll():
        assert lock.acquire(blocking=False), "two polls at once"
        try:
            calls.append(1)
            if len(calls) == 2:
                raise RuntimeError("a sampler bug")
            return len(calls)
        finally:
            lock.release()

    errors = []
    p = Poller(poll, results.append, 0.1, on_error=errors.append).start()
    import time
    time.sleep(0.55)
    p.stop()
    assert p.error == "RuntimeError: a sampler bug" and 2 not in results and len(results) >= 3
    assert errors == ["RuntimeError: a sampler bug"]  # said, not swallowed
    with pytest.raises(ValueError, match="at least 0.1"):
        Poller(poll, results.append, 0.05)

    def consumer(r):  # a consumer that fails once (e.g. the UI shutting down) stops nothing
        if r == 1:
            raise KeyError("gone")
        results.append(r)

    calls.clear()
    results.clear()
    p = Poller(lambda: len(calls.append(1) or calls), consumer, 0.1).start()
    time.sleep(0.45)
    p.stop()
    assert p.error == "KeyError: 'gone'" and results[:2] == [2, 3]


def test_every_field_of_a_training_snapshot_goes_to_json_and_back():
    """A snapshot with every kind of field set (the present moment, hot lines, copies, ops, the
    job's end) reads back equal: a field the codec cannot read drops whole cycles from recordings."""
    from tuimon.model import (
        CopyTimes,
        HotLine,
        OpCounts,
        StepInProgress,
        TrainingSnapshot,
        from_json,
        to_json,
    )

    snap = TrainingSnapshot(
        pid=7, steps=12, step_source="backward", since_step_s=1.5, longest_step_ms=30.0,
        now=StepInProgress(step=13, phase="sync", phase_s=1.2, step_s=1.5, still_s=1.2, where="t.py:3 in f",
                           waiting_in="q.py:9 in get", collective="all_reduce"),
        end="exception", end_text="RuntimeError: x\n  at t.py:3 in f", stacks="Thread 1", stacks_age_s=0.5,
        hot_lines=[HotLine(phase="other", line="t.py:3 in f `x()`", samples=40, share=0.8, phase_share=1.0,
                           python=0.5, native=0.25, waiting=0.25)], samples=50, optimizer="SGD foreach=False",
        copies=CopyTimes(share=0.5, ms=10.0, h2d_mb=64.0, pageable=1.0, blocking=1.0, calls=1.0, d2h_mb=0.5),
        ops=OpCounts(step=40, total=3000, by_phase={"other": 2990}, lines={"t.py:4 in g `y = y * 2`": 2990}))
    back = from_json(TrainingSnapshot, json.loads(json.dumps(to_json(snap))))
    assert back == snap
