"""Recordings: written, read back through the replay path, and the committed real-GPU one."""

import json
import os
import threading

import pytest

from tests.conftest import ROOT
from tests.fake_nvml import FakeNvml
from tuimon.sources.nvml import DeviceSampler
from tuimon.sources.poller import Poller
from tuimon.sources.process import ProcessSampler
from tuimon.sources.recording import Recorder, RecordingError, ReplaySource, read_recording
from tuimon.sources.values import num

FIXTURE = ROOT / "tests" / "fixtures" / "h200_demo.jsonl"


def test_record_and_replay_give_the_same_samples(tmp_path):
    path = str(tmp_path / "r.jsonl")
    gpus, procs = DeviceSampler(FakeNvml()), ProcessSampler(os.getpid())
    rec = Recorder(path, note="test")
    live = []
    for _ in range(3):
        entries = [("gpu", gpus.sample()), ("process", procs.sample())]
        for source, data in entries:
            rec.record(source, data)
            live.append((source, json.loads(json.dumps(data))))
    rec.close()
    replayed = []
    n = ReplaySource(path, speed=0).run(lambda source, data: replayed.append((source, data)))
    assert n == 6 and replayed == live
    assert replayed[0][1][0]["sm_active"] == {"na": "first sample"}  # unavailable stays unavailable


def test_replay_is_paced_and_stoppable(tmp_path):
    path = str(tmp_path / "r.jsonl")
    rec = Recorder(path)
    for i in range(5):
        rec.record("process", {"i": i}, t=i * 1_000_000_000)
    rec.close()
    stop, got = threading.Event(), []
    src = ReplaySource(path, speed=20.0)  # 4 s of recording in 0.2 s

    def on(source, data):
        got.append(data["i"])
        if data["i"] == 2:
            stop.set()

    src.run(on, stop)
    assert got == [0, 1, 2]


def test_bad_recordings(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text("not json\n")
    with pytest.raises(RecordingError, match="not a tuimon recording"):
        read_recording(str(p))
    p.write_text(json.dumps({"format": "tuimon-recording", "version": 9}) + "\n")
    with pytest.raises(RecordingError, match="format v9"):
        read_recording(str(p))
    p.write_text(json.dumps({"format": "tuimon-recording", "version": 1}) + "\n{broken\n"
                 + json.dumps({"t": 1, "source": "gpu", "data": []}) + "\n" + json.dumps({"t": "x"}) + "\n")
    header, entries = read_recording(str(p))
    assert [e["source"] for e in entries] == ["gpu"] and header["skipped"] == 2


def test_the_committed_real_gpu_recording():
    header, entries = read_recording(str(FIXTURE))
    entries = list(entries)
    assert "H200" in header["note"] and header["skipped"] == 0
    gpu = [e["data"][0] for e in entries if e["source"] == "gpu"]
    training = [e["data"] for e in entries if e["source"] == "training"]
    procs = [e["data"] for e in entries if e["source"] == "process"]
    assert len(gpu) > 20 and len(training) == len(gpu) == len(procs)
    busy = [g for g in gpu[2:] if num(g["sm_active"]) is not None]
    assert busy and all(g["gpm"] and g["name"] == "NVIDIA H200" for g in busy)
    assert max(g["sm_active"] for g in busy) > 10 and all(g["uses_target"] for g in busy)
    assert training[-1]["steps"] > 100 and training[-1]["ranges"]
    assert len(procs[-1]["procs"]) >= 3  # the job and its two DataLoader workers


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

    p = Poller(poll, results.append, 0.1).start()
    import time
    time.sleep(0.55)
    p.stop()
    assert p.error == "RuntimeError: a sampler bug" and 2 not in results and len(results) >= 3
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
