"""`tuimon trace`: a job's steps and phases as a Chrome/Perfetto trace. A real 2-rank DDP job
(torchrun, gloo, tests/workloads/ddp.py) recorded by `tuimon record` and traced from the
recording, and traced live from its ranks' channels; the trace checked against the recording (and
the rings) step by step, its slices checked to nest as a trace viewer reads them, and loaded with
Perfetto's trace processor where its binary is on this machine (module docstring of
tests/perfetto_tp.py: how to give it one)."""

import gzip
import json
import subprocess
import sys
from collections import defaultdict

import psutil
import pytest

from tests.conftest import ROOT, tuimon_cmd, wait_for
from tests.perfetto_tp import trace_processor
from tuimon.channel import SegmentReader, find_segments
from tuimon.channel import layout as L
from tuimon.model import TimelineStep
from tuimon.monitor.chrome_trace import DATA_TID, STEPS_TID, chrome_trace
from tuimon.monitor.timeline import Counter, ProcessTimeline, Timeline
from tuimon.sources.recording import Recording

DDP = str(ROOT / "tests" / "workloads" / "ddp.py")
FIXTURE = ROOT / "tests" / "fixtures" / "h200_demo.jsonl"


def slices(trace):
    """X events by (pid, tid), in order."""
    out = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            out[(e["pid"], e["tid"])].append(e)
    for v in out.values():
        v.sort(key=lambda e: (e["ts"], -e["dur"]))
    return out


def assert_nests(trace):
    """On every track, a slice that starts inside another ends inside it (what a viewer needs to
    draw them as parent and children; Perfetto drops or cuts slices that overlap otherwise)."""
    for key, events in slices(trace).items():
        stack = []
        for e in events:
            end = e["ts"] + e["dur"]
            while stack and e["ts"] >= stack[-1] - 0.002:
                stack.pop()
            assert not stack or end <= stack[-1] + 0.002, f"{key}: {e} overlaps its parent's end {stack[-1]}"
            stack.append(end)


def names(trace):
    return {(e["pid"], e.get("tid")): e["args"]["name"] for e in trace["traceEvents"]
            if e["ph"] == "M" and e["name"] in ("process_name", "thread_name")}


def step(i, t0, ms, **phases):
    return TimelineStep(index=i, t0=t0, t1=t0 + int(ms * 1e6), phases={k: int(v * 1e6) for k, v in phases.items()},
                        values={"sync.count": 2.0, "gpu.step_ns": 9.5e6})


def test_steps_phases_ranges_and_counters_as_trace_events():
    p = ProcessTimeline(812, rank=1)
    p.steps = {5: step(5, 10_000_000, 10, other=1, backward=5, data=2, forward=2),
               6: step(6, 20_000_000, 12, forward=3, sync=4, comm=5),
               7: step(7, 40_000_000, 10, copy=2, forward=3, data=1, backward=4)}
    p.ranges = [("inner", 900, 1, 11_000_000, 12_000_000), ("outer", 900, 0, 11_000_000, 15_000_000)]
    p.data_waits = [(900, 10_000_000, 12_000_000)]
    tl = Timeline("test", [p], [Counter("SM active", "%", 0, "NVIDIA H100", [(10_000_000, 97.0), (20_000_000, 88.0)])])
    trace = chrome_trace(tl)
    assert_nests(trace)
    assert names(trace)[(812, None)] == "rank 1 (PID 812)" and names(trace)[(812, STEPS_TID)] == "steps and phases"
    assert names(trace)[(812, DATA_TID)] == "data waits" and names(trace)[(812, 900)] == "ranges on thread 900"
    track = slices(trace)[(812, STEPS_TID)]
    assert [e["name"] for e in track] == ["step 5", "data", "forward", "backward", "other",
                                          "step 6", "forward", "comm", "sync",
                                          "step 7", "data", "copy", "forward", "backward"]  # vocab.PHASES
    assert track[0]["args"] == {"step": 5, "ms": 10.0, "sync.count": 2.0, "gpu.step_ms": 9.5}
    assert [(e["ts"], e["dur"]) for e in track[1:5]] == [(10000.0, 2000.0), (12000.0, 2000.0), (14000.0, 5000.0),
                                                         (19000.0, 1000.0)]
    assert [e["name"] for e in slices(trace)[(812, 900)]] == ["outer", "inner"]  # nested as they ran
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert [(e["name"], e["ts"], e["args"]["value"]) for e in counters] == [("SM active (%)", 10000.0, 97.0),
                                                                           ("SM active (%)", 20000.0, 88.0)]


def test_phases_longer_than_their_step_are_cut_at_its_end():
    p = ProcessTimeline(5)
    p.steps = {1: step(1, 0, 10, forward=8, backward=4)}  # (records lost or corrupt: more than the step)
    trace = chrome_trace(Timeline("test", [p]))
    assert_nests(trace)
    assert [e["dur"] for e in slices(trace)[(5, STEPS_TID)]] == [10000.0, 8000.0, 2000.0]


def test_a_recording_without_steps_gives_the_shown_process_step_times_and_its_gpu_counters(tmp_path):
    """The committed H200 recording (made before recordings kept every step)."""
    out = tmp_path / "h200.json.gz"
    p = subprocess.run(tuimon_cmd("trace", "--recording", FIXTURE, "-o", out), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "without their phases" in p.stdout and "3 GPU counter tracks" in p.stdout
    trace = json.load(gzip.open(out, "rt"))
    assert_nests(trace)
    cycles = list(Recording(str(FIXTURE)).cycles())
    last = cycles[-1].training
    steps = slices(trace)[(last.pid, STEPS_TID)]
    assert steps[-1]["args"]["step"] == last.steps and steps[-1]["args"]["ms"] == pytest.approx(last.recent_step_ms[-1], abs=0.002)
    gpu = [c for c in cycles if c.gpus][-1].gpus[0]
    sm = [e for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == "SM active (%)"]
    assert len(sm) == sum(1 for c in cycles if c.gpus and isinstance(c.gpus[0].sm_active, float))
    assert sm[-1]["args"]["value"] == gpu.sm_active and sm[-1]["ts"] == pytest.approx(cycles[-1].t / 1000, abs=1)


def ddp_job(truth, seconds):
    return subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, "-m", "torch.distributed.run",
                                       "--standalone", "--nproc-per-node", "2", DDP, "--truth", truth,
                                       "--seconds", seconds, "--calibrate", 10),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def end(job):
    """The job and everything it started, by PID."""
    try:
        kids = psutil.Process(job.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        kids = []
    for k in [psutil.Process(job.pid), *kids] if job.poll() is None else kids:
        try:
            k.kill()
        except psutil.NoSuchProcess:
            pass
    job.wait()


def check_against_steps(trace, by_pid):
    """Every step of each process in the trace, as the source has it: one slice per step with its
    times, and its phases summing to it within 1%."""
    tracks = slices(trace)
    for pid, steps in by_pid.items():
        events = tracks[(pid, STEPS_TID)]
        got = [e for e in events if e["cat"] == "step"]
        assert [e["args"]["step"] for e in got] == sorted(steps), pid
        for e in got:
            s = steps[e["args"]["step"]]
            assert e["ts"] == pytest.approx(s.t0 / 1000, abs=0.002) and e["dur"] == pytest.approx((s.t1 - s.t0) / 1000, abs=0.002)
            inside = [x for x in events if x["cat"] == "phase" and x["args"]["step"] == s.index]
            assert sum(x["dur"] for x in inside) == pytest.approx(e["dur"], rel=0.01), (e, inside)


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    """A 2-rank DDP job recorded by `tuimon record` and traced live; then its recording traced."""
    d = tmp_path_factory.mktemp("ddp")
    job = ddp_job(d, seconds=14)
    try:
        assert wait_for(lambda: "training" in job.stdout.readline(), timeout=180, what="training")
        rec = d / "ddp.jsonl"
        p = subprocess.run(tuimon_cmd("record", job.pid, "-o", rec, "--seconds", 6, "--interval", 0.5),
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        live = d / "live.json"
        said_live = subprocess.run(tuimon_cmd("trace", job.pid, "--minutes", 1, "-o", live), capture_output=True,
                                   text=True, timeout=60)
        rings = {}
        for f in find_segments(job.pid):
            if f.relation == "descendant":
                with SegmentReader(f.path) as r:
                    r.seek_recent(r.info.ring_records)
                    rings[r.info.pid] = {x[5]: (x[6], x[7]) for x in r.drain().records if x[0] == L.STEP}
    finally:
        end(job)
    out = d / "ddp.json"
    said = subprocess.run(tuimon_cmd("trace", "--recording", rec, "-o", out), capture_output=True, text=True,
                          timeout=60)
    by_pid: dict[int, dict] = defaultdict(dict)
    ranks = {}
    for c in Recording(str(rec)).cycles():
        for ps in c.steps:
            ranks[ps.pid] = ps.rank
            for s in ps.steps:
                by_pid[ps.pid][s.index] = s
    return {"said": said, "out": out, "by_pid": by_pid, "ranks": ranks, "said_live": said_live, "live": live,
            "rings": rings}


def test_a_two_rank_ddp_recording_as_a_trace(ddp):
    """Per-rank tracks; every step of both ranks as the recording has it, its phases summing to it."""
    p, out, by_pid, ranks = ddp["said"], ddp["out"], ddp["by_pid"], ddp["ranks"]
    assert sorted(ranks.values()) == [0, 1] and all(len(v) >= 20 for v in by_pid.values()), ranks
    assert p.returncode == 0, p.stderr
    total = sum(len(v) for v in by_pid.values())
    assert p.stdout.startswith(f"wrote {out}: rank 0, rank 1; {total:,} steps over ")
    trace = json.loads(out.read_text())
    assert_nests(trace)
    for pid, rank in ranks.items():
        assert names(trace)[(pid, None)] == f"rank {rank} (PID {pid})"
    check_against_steps(trace, by_pid)
    phases = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "phase"}
    assert {"forward", "backward", "comm", "optimizer"} <= phases, phases  # gloo's all-reduce: the comm phase


def test_a_live_two_rank_job_as_a_trace(ddp):
    """The steps each rank's ring holds, at their times, with the loop's DataLoader waits."""
    p, live = ddp["said_live"], ddp["live"]
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"wrote {live}: rank 0, rank 1; ") and "no GPU metrics" in p.stdout
    trace = json.loads(live.read_text())
    assert_nests(trace)
    tracks = slices(trace)
    assert len(ddp["rings"]) == 2
    for pid, ring in ddp["rings"].items():
        got = [e for e in tracks[(pid, STEPS_TID)] if e["cat"] == "step"]
        assert len(got) >= 20
        for e in got:  # (the ring read after the trace holds every step the trace has, at the same times)
            t0, t1 = ring[e["args"]["step"]]
            assert e["ts"] == pytest.approx(t0 / 1000, abs=0.002) and e["dur"] == pytest.approx((t1 - t0) / 1000, abs=0.002)
        assert tracks[(pid, DATA_TID)]


def test_perfetto_trace_processor_reads_the_two_rank_trace(ddp):
    """Loaded by Perfetto itself: a step slice per step on each rank's track, phases as its children
    summing to it within 1%."""
    by_pid, ranks = ddp["by_pid"], ddp["ranks"]
    with trace_processor(str(ddp["out"])) as tp:  # (skips where there is no trace processor binary)
        rows = list(tp.query("select p.name as proc, count(*) as n from slice s join thread_track tt on s.track_id = "
                             "tt.id join thread using (utid) join process p using (upid) where s.depth = 0 and "
                             "s.name like 'step %' group by p.name"))
        assert {r.proc: r.n for r in rows} == {f"rank {ranks[pid]} (PID {pid})": len(v) for pid, v in by_pid.items()}
        bad = list(tp.query("select s.id, s.dur, sum(c.dur) as phases from slice s join slice c on c.parent_id = s.id "
                            "where s.depth = 0 group by s.id having abs(phases - s.dur) > s.dur * 0.01"))
        assert bad == []
