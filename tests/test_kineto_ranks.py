"""`c` on a torchrun job through Kineto's on-demand path (issue 41, capture/kineto_ranks.py): one
config per rank with the same wall-clock window (Kineto's synchronized start), and which steps each
rank's trace holds, read from the ranks' own step records.

The boundary faked: Kineto inside each rank. tests/helpers/fake_kineto_rank.py is a rank process
(its channel with its rank and its optimizer steps, in lockstep with the other fakes as DDP's ranks
step) whose Kineto client, written from Kineto's structs and its start rules, asks the endpoint as
that process (the endpoint checks the sender's PID: one process per rank), refuses a config as
Kineto would, and writes the fixture trace once its window has run, with the steps it traced by its
own clocks. This test process is their launcher (torchrun's place)."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import uuid

import pytest

from tests.conftest import HELPERS
from tests.fake_nvml import FakeNvml
from tuimon.capture import kineto_daemon as K
from tuimon.capture import kineto_ranks as R
from tuimon.capture import kineto_windows
from tuimon.channel import procinfo
from tuimon.cli.capture import cmd_capture

J = R.RankJob
MS = 1_000_000
SEQ_PER_STEP = 15  # autograd nodes a step of tests/workloads/ddp.py's MLP makes (its sequence numbers)


# -- the window ------------------------------------------------------------------------------------------


def test_one_start_for_every_rank_past_the_poll_kinetos_tick_and_its_warm_up():
    wall, mono = 1_800_000_000_123_456_789, 5_000_000_000
    lead_s = R.POLL_S + R.POLL_MARGIN_S + R.WARMUP_S
    assert (R.POLL_MARGIN_S, R.WARMUP_S, lead_s) == (1.5, 1, 7.5)  # (5 s poll, Kineto's 1 s tick + 0.5, 1 s warm-up)
    p = R.plan([J(0, 10, 100, 50.0), J(1, 11, 97, 80.0)], 5, now=(wall, mono))
    assert p.start_ms == 1_800_000_007_624  # (wall + 7.5 s, rounded up to Kineto's ms)
    assert p.start_ns == mono + p.start_ms * MS - wall == mono + 7_500_543_211  # (the same moment on the probes' clock)
    assert p.duration_ms == 400 and p.end_ns == p.start_ns + 400 * MS  # (5 steps at the slowest rank's 80 ms)
    assert "for 400 ms (5 steps at the slowest rank's 80 ms" in p.words and "7.5 s ahead" in p.words, p.words
    exact = R.plan([J(0, 10, 1, 50.0)], 1, poll_s=0.5, now=(2_000 * MS, 0))
    assert (exact.start_ms, exact.start_ns) == (2_000 + 3_000, 3_000 * MS)  # (0.5 + 1.5 + 1 s; no rounding)
    assert R.plan([J(0, 10, None, 10.0), J(1, 11, 5, None)], 30, now=(wall, mono)).duration_ms == 300  # (any count)
    floor = R.plan([J(0, 10, 100, 1.5)], 5, now=(wall, mono))
    assert floor.duration_ms == R.MIN_DURATION_MS == 100 and "100 ms at least" in floor.words, floor.words
    assert R.plan([J(0, 10, 100, 33.4)], 3, now=(wall, mono)).duration_ms == 101  # (ceil of 100.2)
    cap = R.plan([J(0, 10, 100, 10_000.0)], 500, now=(wall, mono))
    assert cap.duration_ms == 300_000 and "300 s at most" in cap.words
    unknown = R.plan([J(0, 10, 100, None), J(1, 11, 100, None)], 3, now=(wall, mono))
    assert unknown.duration_ms == 3_000 and "no step time known yet" in unknown.words
    t0 = time.monotonic_ns()
    live = R.plan([J(0, 10, 1, 50.0)], 1)
    assert abs(live.start_ns - t0 - 7_500 * MS) < 50 * MS and abs(live.start_ms / 1000 - time.time() - 7.5) < 0.05
    with pytest.raises(ValueError):
        R.plan([], 5)
    with pytest.raises(ValueError):
        R.plan([J(0, 10, 1, 50.0)], 0)


def test_the_steps_a_window_held_are_those_begun_in_it():
    steps = [(i, i * 100 * MS, (i + 1) * 100 * MS) for i in range(10, 20)]  # (step i begins at i x 100 ms)
    assert R.covered(steps, 1_200 * MS, 1_500 * MS) == (12, 15)  # (both edges: begun exactly at each)
    assert R.covered(steps, 1_200 * MS + 1, 1_500 * MS - 1) == (13, 14)
    assert R.covered(steps, 1_250 * MS, 1_299 * MS) is None
    assert R.unknown_why(steps, 1_200 * MS, 1_500 * MS) is None
    assert R.unknown_why(steps, 1_000 * MS, 1_500 * MS) is None  # (the first step held began at the start)
    assert "no longer reach back" in (R.unknown_why(steps, 999 * MS, 1_500 * MS) or "")
    assert R.unknown_why(steps, 1_200 * MS, 2_000 * MS) is None  # (the last step ended at the end)
    assert "ended past the window's end" in (R.unknown_why(steps, 1_200 * MS, 2_000 * MS + 1) or "")
    assert "no longer reach back" in (R.unknown_why([], 0, 1) or "")


def test_the_ranks_steps_are_said_with_whether_they_agree():
    said = R._steps_words
    assert "rank 0: 5..9, rank 1: 5..9 (the same on every rank)" in said({1: (5, 9), 0: (5, 9)}, {})
    assert "rank 0: 5..9, rank 1: 5..8 (not the same on every rank, a step apart at an edge" in \
           said({0: (5, 9), 1: (5, 8)}, {})
    assert said({0: (5, 9), 1: (3, 9)}, {}).endswith("rank 1: 3..9 (not the same on every rank)")
    assert said({0: (5, 9), 1: None}, {}).endswith("rank 1: none began in the window (not the same on every rank)")
    assert said({0: (5, 9)}, {1: "its records"}).endswith("rank 0: 5..9; rank 1's not known: its records")


def test_the_config_is_one_of_time_with_no_iteration_key_that_would_take_precedence():
    lines = K.trace_config("/x/t.json", duration_ms=400, start_time_ms=1_800_000_007_624, warmup_s=1).splitlines()
    assert {"PROFILE_START_TIME=1800000007624", "ACTIVITIES_DURATION_MSECS=400",
            "ACTIVITIES_WARMUP_PERIOD_SECS=1"} <= set(lines), lines
    assert not [line for line in lines if line.startswith(("PROFILE_START_ITERATION", "ACTIVITIES_ITERATIONS"))]
    assert "PROFILE_START_TIME=0" in K.trace_config("/x/t.json", duration_ms=400).splitlines()
    for bad in ({"start_time_ms": -5}, {"warmup_s": -1}, {"duration_ms": 0}):
        with pytest.raises(ValueError):
            K.trace_config("/x/t.json", **{"duration_ms": 400, **bad})


def test_a_config_not_taken_yet_is_withdrawn():
    name = f"tuimon-test-{uuid.uuid4().hex[:12]}"
    with K.KinetoEndpoint(name) as e:
        assert not e.withdraw(os.getpid())
        e._job(os.getpid(), 0, time.monotonic())
        e.request_trace(os.getpid(), "/x/t.json", duration_ms=100)
        assert e.withdraw(os.getpid()) and not e.withdraw(os.getpid()) and e.handed(os.getpid()) == 0.0
        e.request_trace(os.getpid(), "/x/t.json", duration_ms=100)  # (nothing waits any more: a new one may)


def test_typical_step_time():
    assert R.typical_ms([(1, 0, 10_000_000), (2, 0, 20_000_000)]) is None
    assert R.typical_ms([(1, 0, 10_000_000), (2, 0, 30_000_000), (3, 0, 20_000_000), (4, 5, 5)]) == 20.0


# -- fake ranks -------------------------------------------------------------------------------------------

STEP_MS = 50
# Longer than a window that ends without every rank's trace waits for it (OTHERS_WAIT_S, 30 s): such
# a window says so in its end, which the assertions then show.
WINDOW_WAIT_S = 75


@pytest.fixture
def fake_ranks(tmp_path, monkeypatch):
    """start(asks): rank processes of a job under this process, in lockstep, each asking (or not) an
    endpoint of its own name (not the host's "dynolog"); the poll interval, Kineto's tick and the
    margin shortened to the fakes' (they ask every 0.1 s and tick every 0.1 s; Kineto: 5 s, 1 s)."""
    monkeypatch.setenv("TUIMON_CAPTURE_DIR", str(tmp_path / "captures"))
    monkeypatch.setenv("TUIMON_KINETO", "1")
    name = f"tuimon-test-{uuid.uuid4().hex[:12]}"
    monkeypatch.setattr(kineto_windows, "KinetoEndpoint", lambda: K.KinetoEndpoint(name))
    monkeypatch.setattr(kineto_windows, "REGISTER_WAIT_S", 2.0)
    monkeypatch.setattr(R, "POLL_S", 0.3)
    monkeypatch.setattr(R, "KINETO_TICK_S", 0.1)
    # The margin: the fakes' tick and 1.4 s for a loaded host. Beside two CPU burners a fake's tick came
    # later than 0.4 s once, and its Kineto refused the window ("insufficient time for warmup").
    monkeypatch.setattr(R, "POLL_MARGIN_S", 1.5)
    plans: list[tuple[list[R.RankJob], R.Plan]] = []
    real_plan = R.plan

    def recorded(ranks, steps, poll_s=None, now=None):
        plans.append((list(ranks), real_plan(ranks, steps, poll_s, now)))
        return plans[-1][1]

    monkeypatch.setattr(R, "plan", recorded)
    out = tmp_path / "ranks"
    out.mkdir()
    procs: list[subprocess.Popen] = []
    origin = time.monotonic_ns()

    def start(asks: list[bool | str], source: str = "optimizer") -> list[subprocess.Popen]:
        for rank, ask in enumerate(asks):
            p = subprocess.Popen([sys.executable, str(HELPERS / "fake_kineto_rank.py"), name, str(rank), str(len(asks)),
                                  str(STEP_MS), ask if isinstance(ask, str) else str(int(ask)), source, str(out),
                                  str(origin)],
                                 stdout=subprocess.PIPE, text=True)
            procs.append(p)
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        pids = {p.pid for p in procs}
        monkeypatch.setattr(kineto_windows, "job_uses_daemon", lambda pid: pid in pids)
        time.sleep(0.6)  # (a few steps on each: a typical step time)
        return procs

    yield start, out, plans
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(10)


def _reports(out, ranks, timeout=30.0) -> list[dict]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            return [json.loads((out / f"rank{r}.json").read_text()) for r in ranks]
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"no report from ranks {ranks} within {timeout} s: {sorted(os.listdir(out))}")


def _check_traced(reports: list[dict], plan: R.Plan, message: str) -> tuple[int, int]:
    """Every fake rank took the same config of time, Kineto ran it (refused none), every rank
    traced the same steps by its own clocks, and the message claims exactly those: the steps."""
    for rep in reports:
        assert "refused" not in rep and rep["mode"] == "time", rep
        assert f"PROFILE_START_TIME={plan.start_ms}" in rep["config"].splitlines(), rep
        assert f"ACTIVITIES_DURATION_MSECS={plan.duration_ms}" in rep["config"].splitlines(), rep
        assert os.path.exists(rep["trace"])
    traced = {tuple(rep["traced"]) for rep in reports}
    assert len(traced) == 1, reports  # (lockstep ranks, one span of the clock: the same steps)
    first, last = traced.pop()
    said = ", ".join(f"rank {rep['rank']}: {first}..{last}" for rep in reports)
    assert f"{said} (the same on every rank)" in message, (message, reports)
    return first, last


def test_tuimon_capture_on_the_launcher_takes_every_rank_at_the_same_steps_and_names_the_missing_one(
        fake_ranks, capsys):
    start, out, plans = fake_ranks
    procs = start([True, True, False])  # (rank 2's Kineto never asks the endpoint)
    args = argparse.Namespace(pid=os.getpid(), steps=3, seconds=None, wait=True, json=True, timeout=60.0, memory=False)
    asked = time.time()
    rc = cmd_capture(args)
    said = capsys.readouterr()
    assert rc == 0, said.err
    st = json.loads(said.out)
    ranks, plan = plans[-1]
    assert sorted(r.rank for r in ranks) == [0, 1, 2]
    # (asked after rank 2's registration was waited for: poll, margin and warm-up ahead of that)
    ahead = R.POLL_S + R.POLL_MARGIN_S + R.WARMUP_S  # (the fixture's)
    assert asked + ahead < plan.start_ms / 1000 < asked + kineto_windows.REGISTER_WAIT_S + ahead + 0.5, plan
    assert plan.duration_ms == 3 * STEP_MS, plan  # (the fakes' steps: 50 ms exactly)
    reports = _reports(out, [0, 1])
    first, last = _check_traced(reports, plan, st["message"])
    assert last - first + 1 in (plan.duration_ms // STEP_MS, plan.duration_ms // STEP_MS + 1), (first, last, plan)
    assert not (out / "rank2.json").exists()
    assert st["kind"] == "kineto" and st["state"] == "done", st
    assert (st["first_step"], st["last_step"]) == (first, last), st
    assert st["rank_traces"] == {"0": reports[0]["trace"], "1": reports[1]["trace"]}, st
    assert st["path"] == reports[0]["trace"] and st["path"].endswith(f"_{procs[0].pid}.json")
    assert "on 2 ranks of 3" in st["message"] and f"rank 2 (PID {procs[2].pid}) did not ask" in st["message"], st
    assert any("ampere_sgemm_128x64_tn" in line for line in st["summary"]["lines"]), st["summary"]
    assert f"rank 1: {reports[1]['trace']}" in said.err, said.err


def test_ranks_without_an_optimizer_count_are_traced_at_the_same_steps(fake_ranks):
    """A rank PID asked for (its agent, this process, is the job's root); steps counted otherwise:
    Kineto's window of time needs no count of Kineto's (choose() refuses Kineto for such a job: it
    counts optimizer steps, so the window is asked here of the ranks' channels directly)."""
    start, out, plans = fake_ranks
    procs = start([True, True])
    channels = R.RankChannels(os.getpid())
    try:
        ranks = channels.ranks()
        assert [r.rank for r in ranks] == [0, 1] and all(r.steps and r.step_ms and r.recent for r in ranks), ranks

        def bare():
            return [R.RankJob(r.rank, r.pid, None, r.step_ms, r.recent) for r in channels.ranks()]

        w = R.for_ranks(bare, procs[0].pid, procinfo.start_ticks(procs[0].pid) or 0, "train.py", lambda: 0)
        assert w is not None
        seq = w.request(steps=4)
        st = w.wait(seq, WINDOW_WAIT_S)
        assert st.state == "done", st
        _ranks, plan = plans[-1]
        first, last = _check_traced(_reports(out, [0, 1]), plan, st.message)
        assert (st.first_step, st.last_step) == (first, last) and w.steps == {0: (first, last), 1: (first, last)}
        w.close()
    finally:
        channels.close()


def test_a_config_not_taken_by_the_start_less_the_warm_up_is_withdrawn_and_its_rank_named(fake_ranks):
    """Rank 1 asked once (registered) and then falls silent: its config is never taken; at the
    start - warm-up (Kineto would refuse it after) it is withdrawn, and no steps are said for it."""
    start, out, plans = fake_ranks
    procs = start([True, "once"])
    channels = R.RankChannels(os.getpid())
    try:
        w = R.for_ranks(channels.ranks, procs[0].pid, procinfo.start_ticks(procs[0].pid) or 0, "train.py", lambda: 0)
        assert w is not None
        seq = w.request(steps=3)
        st = w.wait(seq, WINDOW_WAIT_S)
        assert st.state == "done", st
        _ranks, plan = plans[-1]
        rep = _reports(out, [0])[0]
        assert rep["mode"] == "time" and "refused" not in rep, rep
        assert f"rank 0: {rep['traced'][0]}..{rep['traced'][1]};" in st.message, st.message
        assert "on 1 rank of 2" in st.message and f"rank 1 (PID {procs[1].pid}) did not ask" in st.message, st
        assert "rank 1:" not in st.message and w.steps == {0: tuple(rep["traced"])} and list(w.files) == [0]
        assert len(w.endpoint.jobs()) == 2 and not [j for j in w.endpoint.jobs() if j.pending], "withdrawn"
        assert not (out / "rank1.json").exists()
        w.close()
    finally:
        channels.close()


def test_c_in_a_session_that_follows_the_ranks_takes_every_rank(fake_ranks):
    from tuimon.monitor.session import LiveSession
    from tuimon.sources.nvml import DeviceSampler

    start, out, plans = fake_ranks
    start([True, True])
    fake = FakeNvml()
    fake.fail["nvmlInit"] = 12
    session = LiveSession(os.getpid(), 0.2, devices=DeviceSampler(fake))
    try:
        end = time.monotonic() + 20
        while time.monotonic() < end:
            cycle = session.poll()
            if len(cycle.ranks) == 2 and cycle.training is not None and cycle.training.step_source == "optimizer":
                break
            time.sleep(0.2)
        assert len(cycle.ranks) == 2, cycle.problems
        said = session.request_capture(3, None)
        assert "asking Kineto's endpoint" in said, said
        end = time.monotonic() + 30
        while time.monotonic() < end:
            cycle = session.poll()
            if cycle.capture is not None and cycle.capture.state in ("done", "failed"):
                break
            time.sleep(0.2)
        st = cycle.capture
        assert st is not None and st.state == "done" and st.kind == "kineto", (st, cycle.problems)
        ranks, plan = plans[-1]
        assert len(ranks) == 2 and all(r.recent for r in ranks), ranks
        assert "on 2 ranks of 2" in st.message and "rank 1:" in st.message, st.message
        first, last = _check_traced(_reports(out, [0, 1]), plan, st.message)
        assert (st.first_step, st.last_step) == (first, last), st
    finally:
        session.stop()


def test_a_real_torchrun_job_traced_on_both_ranks_at_the_same_steps(tmp_path, monkeypatch):
    """Real Kineto (torch's CPU wheel) in two gloo ranks under torchrun, started by `tuimon run` in
    daemon mode; `tuimon capture` on the launcher: both ranks' traces hold the same steps, within
    one step at each edge, and tuimon says the steps each rank's records put in the window, as many
    as the traces hold (give or take a step cut by an edge). The ranks run the same ops step by
    step, so the autograd sequence numbers in their traces are the same when the steps are."""
    from tests.conftest import tuimon_cmd
    from tests.test_kineto_daemon import _endpoint, _need_daemon_client
    from tests.test_ranks import DDP, stop

    _need_daemon_client()
    _endpoint().close()  # (skipped when the host's endpoint is held)
    monkeypatch.setenv("TUIMON_KINETO", "1")
    monkeypatch.setenv("TUIMON_CAPTURE_DIR", str(tmp_path / "captures"))
    job = subprocess.Popen(tuimon_cmd("run", "--headless", "--", sys.executable, "-m", "torch.distributed.run",
                                      "--standalone", "--nproc-per-node", "2", DDP, "--truth", tmp_path,
                                      "--seconds", 150, "--min-steps", 200),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 90
        while not all((tmp_path / f"rank{r}.json").exists() for r in (0, 1)):
            assert job.poll() is None and time.monotonic() < end, "the ranks did not start"
            time.sleep(0.5)
        p = subprocess.run(tuimon_cmd("capture", job.pid, "--steps", 5, "--wait", "--json"), capture_output=True,
                           text=True, timeout=200)
        assert p.returncode == 0, p.stderr
        st = json.loads(p.stdout)
        assert st["kind"] == "kineto" and st["state"] == "done" and sorted(st["rank_traces"]) == ["0", "1"], st
        assert "every rank from" in p.stderr, p.stderr
        claims = {r: (int(a), int(b)) for r, a, b in re.findall(r"rank (\d+): (\d+)\.\.(\d+)", st["message"])}
        assert sorted(claims) == ["0", "1"], st["message"]
        seqs = {}
        for rank, path in st["rank_traces"].items():
            with open(path) as f:
                events = json.load(f)["traceEvents"]
            s = sorted({e["args"]["Sequence number"] for e in events if "Sequence number" in e.get("args", {})})
            seqs[rank] = (s[0], s[-1])
        print(f"claimed {claims}; sequence numbers {seqs}; {st['message']}")
        # both traces: the same steps, within one step at each edge (a step's boundary a few ms apart on the ranks)
        assert abs(seqs["0"][0] - seqs["1"][0]) <= SEQ_PER_STEP and abs(seqs["0"][1] - seqs["1"][1]) <= SEQ_PER_STEP, \
            (seqs, st["message"])
        assert abs(claims["0"][0] - claims["1"][0]) <= 1 and abs(claims["0"][1] - claims["1"][1]) <= 1, st["message"]
        same = claims["0"] == claims["1"]
        assert ("(the same on every rank)" in st["message"]) == same, st["message"]
        assert ("(not the same on every rank, a step apart at an edge" in st["message"]) == (not same), st["message"]
        assert (st["first_step"], st["last_step"]) == claims["0"], st
        for rank, (lo, hi) in seqs.items():  # (each rank's claim: its trace's steps, give or take one cut by an edge)
            first, last = claims[rank]
            assert last - first <= (hi - lo + 1) / SEQ_PER_STEP <= last - first + 2, (rank, seqs, st["message"])
    finally:
        stop(job)
