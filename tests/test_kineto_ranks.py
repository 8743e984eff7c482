"""`c` on a torchrun job through Kineto's on-demand path (issue 41, capture/kineto_ranks.py): one
config per rank with the same absolute start iteration, computed from the ranks' step counts.

The boundary faked: Kineto inside each rank. tests/helpers/fake_kineto_rank.py is a rank process
(its channel with its rank and its optimizer steps) whose Kineto client, written from Kineto's
structs and its start-iteration semantics, asks the endpoint as that process (the endpoint checks
the sender's PID: one process per rank) and writes the fixture trace once its window has run. This
test process is their launcher (torchrun's place)."""

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


# -- where the window starts -------------------------------------------------------------------------


def test_start_iteration_at_its_edges():
    ahead = 131  # ceil((5 s poll + 1.5 s margin) / 50 ms) + 1 spare
    p = R.plan([J(0, 10, 100, 50.0), J(1, 11, 100, 50.0)])
    assert (p.start_iteration, p.roundup, p.first_step) == (100 + ahead, 1, 100 + ahead + 2)
    assert R.plan([J(0, 10, 100, 50.0), J(1, 11, 97, 50.0)]).start_iteration == 100 + ahead  # (the furthest rank)
    assert R.plan([J(0, 10, 90, 200.0), J(1, 11, 100, 50.0)]).start_iteration == 100 + ahead  # (the fastest's time)
    assert R.plan([J(0, 10, 100, 60_000.0)]).start_iteration == 100 + 1 + 1  # (a minute a step: one boundary, + spare)
    assert R.plan([J(0, 10, 100, 6_500.0)]).start_iteration == 100 + 1 + 1  # (exactly one step in 6.5 s)
    assert R.plan([J(0, 10, 100, 6_499.0)]).start_iteration == 100 + 2 + 1
    assert R.plan([J(0, 10, 1, 1.0)]).start_iteration == 1 + 6_500 + 1  # (1 ms steps: 6,500 steps, 6.5 s ahead)
    assert R.plan([J(0, 10, 100, 50.0)], poll_s=0.5).start_iteration == 100 + 40 + 1
    with pytest.raises(ValueError):
        R.plan([])


def test_without_every_ranks_count_the_ranks_round_up_and_are_told_they_may_start_apart():
    p = R.plan([J(0, 10, 100, 50.0), J(1, 11, None, 50.0)])
    assert (p.start_iteration, p.roundup, p.first_step) == (None, 200, 0)  # (131 steps in a poll: round up to 200)
    assert "no optimizer step count for rank 1" in p.words and "may start 200 steps apart" in p.words, p.words
    p = R.plan([J(0, 10, 0, 50.0), J(1, 11, 0, 50.0)])  # (no step yet: Kineto ignores an iteration config then)
    assert p.start_iteration is None and "rank 0, 1" in p.words
    p = R.plan([J(0, 10, 100, None), J(1, 11, 100, None)])
    assert (p.start_iteration, p.roundup) == (None, R.FALLBACK_ROUNDUP) and "no step time known yet" in p.words
    assert [R.roundup_for(n) for n in (None, 0, 9, 10, 19, 20, 99, 131, 500, 4_999)] == \
           [100, 10, 10, 20, 20, 50, 100, 200, 1000, 5000]


def test_the_config_names_an_absolute_start_and_keeps_the_next_step_by_default():
    lines = K.trace_config("/x/t.json", iterations=5, start_iteration=231).splitlines()
    assert "PROFILE_START_ITERATION=231" in lines and "PROFILE_START_ITERATION_ROUNDUP=1" in lines
    lines = K.trace_config("/x/t.json", iterations=5, start_roundup=200).splitlines()
    assert "PROFILE_START_ITERATION=0" in lines and "PROFILE_START_ITERATION_ROUNDUP=200" in lines
    lines = K.trace_config("/x/t.json", iterations=5).splitlines()
    assert "PROFILE_START_ITERATION=0" in lines and "PROFILE_START_ITERATION_ROUNDUP=1" in lines
    with pytest.raises(ValueError):
        K.trace_config("/x/t.json", iterations=5, start_iteration=-1)


def test_typical_step_time():
    assert R.typical_ms([(1, 0, 10_000_000), (2, 0, 20_000_000)]) is None
    assert R.typical_ms([(1, 0, 10_000_000), (2, 0, 30_000_000), (3, 0, 20_000_000), (4, 5, 5)]) == 20.0


# -- fake ranks -------------------------------------------------------------------------------------------

STEP_MS = 50


@pytest.fixture
def fake_ranks(tmp_path, monkeypatch):
    """start(asks): rank processes of a job under this process, each asking (or not) an endpoint of
    its own name (not the host's "dynolog"); the poll interval and margin shortened to the fakes'."""
    monkeypatch.setenv("TUIMON_CAPTURE_DIR", str(tmp_path / "captures"))
    monkeypatch.setenv("TUIMON_KINETO", "1")
    name = f"tuimon-test-{uuid.uuid4().hex[:12]}"
    monkeypatch.setattr(kineto_windows, "KinetoEndpoint", lambda: K.KinetoEndpoint(name))
    monkeypatch.setattr(kineto_windows, "REGISTER_WAIT_S", 2.0)
    monkeypatch.setattr(R, "POLL_S", 0.3)  # (the fakes ask every 0.1 s; Kineto every 5 s)
    monkeypatch.setattr(R, "POLL_MARGIN_S", 0.5)
    plans: list[tuple[list[R.RankJob], R.Plan]] = []
    real_plan = R.plan

    def recorded(ranks, poll_s=None):
        plans.append((list(ranks), real_plan(ranks, poll_s)))
        return plans[-1][1]

    monkeypatch.setattr(R, "plan", recorded)
    out = tmp_path / "ranks"
    out.mkdir()
    procs: list[subprocess.Popen] = []

    def start(asks: list[bool], source: str = "optimizer") -> list[subprocess.Popen]:
        for rank, ask in enumerate(asks):
            p = subprocess.Popen([sys.executable, str(HELPERS / "fake_kineto_rank.py"), name, str(rank), str(len(asks)),
                                  str(STEP_MS), "1" if ask else "0", source, str(out)],
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


def _start_of(config: str) -> int:
    found = re.search(r"^PROFILE_START_ITERATION=(\d+)$", config, re.M)
    assert found is not None, config
    return int(found.group(1))


def test_tuimon_capture_on_the_launcher_takes_every_rank_at_the_same_steps_and_names_the_missing_one(
        fake_ranks, capsys):
    start, out, plans = fake_ranks
    procs = start([True, True, False])  # (rank 2's Kineto never asks the endpoint)
    args = argparse.Namespace(pid=os.getpid(), steps=3, seconds=None, wait=True, json=True, timeout=60.0, memory=False)
    rc = cmd_capture(args)
    said = capsys.readouterr()
    assert rc == 0, said.err
    st = json.loads(said.out)
    ranks, plan = plans[-1]
    assert sorted(r.rank for r in ranks) == [0, 1]  # (the ranks that ask: the plan is theirs)
    ahead = -(-(0.3 + 0.5) * 1000 // min(r.step_ms for r in ranks if r.step_ms)) + 1
    assert plan.start_iteration == max(r.steps for r in ranks if r.steps) + ahead, (ranks, plan)
    reports = _reports(out, [0, 1])
    for rep in reports:  # both handed the same absolute start, both started there, both traces landed
        assert _start_of(rep["config"]) == plan.start_iteration and rep["started_at"] == plan.start_iteration, rep
        assert rep["steps_at_config"] <= plan.start_iteration, rep
        assert "ACTIVITIES_ITERATIONS=3" in rep["config"] and "PROFILE_START_ITERATION_ROUNDUP=1" in rep["config"]
        assert os.path.exists(rep["trace"])
    assert not (out / "rank2.json").exists()
    assert st["kind"] == "kineto" and st["state"] == "done", st
    assert (st["first_step"], st["last_step"]) == (plan.start_iteration + 2, plan.start_iteration + 4), st
    assert st["rank_traces"] == {"0": reports[0]["trace"], "1": reports[1]["trace"]}, st
    assert st["path"] == reports[0]["trace"] and st["path"].endswith(f"_{procs[0].pid}.json")
    assert "on 2 ranks of 3" in st["message"] and f"rank 2 (PID {procs[2].pid}) did not ask" in st["message"], st
    assert any("ampere_sgemm_128x64_tn" in line for line in st["summary"]["lines"]), st["summary"]
    assert f"rank 1: {reports[1]['trace']}" in said.err, said.err


def test_a_rank_without_an_optimizer_count_rounds_up_and_says_the_ranks_may_start_apart(fake_ranks, capsys):
    """A rank PID asked for (its agent, this process, is the job's root); steps counted otherwise on
    every rank: choose() refuses Kineto for the job (it counts optimizer steps) so the plan is asked
    here of the ranks' channels directly."""
    start, out, plans = fake_ranks
    procs = start([True, True])
    channels = R.RankChannels(os.getpid())
    try:
        ranks = channels.ranks()
        assert [r.rank for r in ranks] == [0, 1] and all(r.steps and r.step_ms for r in ranks), ranks
        bare = [R.RankJob(ranks[0].rank, ranks[0].pid, None, ranks[0].step_ms), ranks[1]]
        w = R.for_ranks(lambda: bare, procs[0].pid, procinfo.start_ticks(procs[0].pid) or 0, "train.py", lambda: 0)
        assert w is not None
        seq = w.request(steps=2)
        st = w.wait(seq, 30)
        assert st.state == "done", st
        assert "no optimizer step count for rank 0" in st.message and "may start 20 steps apart" in st.message, st
        reports = _reports(out, [0, 1])
        for rep in reports:
            assert _start_of(rep["config"]) % 20 == 0 and "PROFILE_START_ITERATION_ROUNDUP=20" in rep["config"], rep
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
        assert plan.start_iteration is not None and len(ranks) == 2
        assert "on 2 ranks of 2" in st.message and "rank 1:" in st.message, st.message
        assert [_start_of(r["config"]) for r in _reports(out, [0, 1])] == [plan.start_iteration] * 2
    finally:
        session.stop()


@pytest.mark.xfail(strict=False, reason=(
    "seen on torch 2.13 CPU, gloo, 2 ranks of tests/workloads/ddp.py: 1 run of 4 traced the same steps on both "
    "ranks (autograd sequence numbers 2835.. on both); in the others, with the same absolute start handed to both "
    "and no rank past it, the ranks' traces held different steps (in one, one rank's the 5 steps before the "
    "other's: sequence numbers 4620-4695 against 4695-4770, 15 a step). Why Kineto's counts differ between the "
    "ranks there is not found yet"))
def test_a_real_torchrun_job_traced_on_both_ranks_at_the_same_steps(tmp_path, monkeypatch):
    """Real Kineto (torch's CPU wheel) in two gloo ranks under torchrun, started by `tuimon run` in
    daemon mode; `tuimon capture` on the launcher: both traces hold the same steps. The ranks run
    the same ops step by step, so the autograd sequence numbers in their traces are the same when
    the steps are."""
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
        assert "every rank from step" in p.stderr, p.stderr
        seqs = []
        for path in st["rank_traces"].values():
            with open(path) as f:
                events = json.load(f)["traceEvents"]
            s = [e["args"]["Sequence number"] for e in events if "Sequence number" in e.get("args", {})]
            seqs.append((min(s), max(s)))
        assert seqs[0] == seqs[1], (seqs, st["message"])
    finally:
        stop(job)
