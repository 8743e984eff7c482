"""The present moment without processes: the stall rule, why a job ended, the verdicts and the
words they show (the real loops are in test_present_live.py)."""

import pytest

from tests.helpers.flat_evidence import flat_evidence as Evidence
from tuimon.analysis import thresholds as T
from tuimon.analysis.ending import exception_in, job_end
from tuimon.analysis.stall import Stall, check, culprits, limit_s, rank_check
from tuimon.analysis.verdicts import diagnose
from tuimon.model import ProcessSample, RankRow, StepInProgress, TrainingSnapshot


def snap(**kw):
    now = kw.pop("now", None)
    return TrainingSnapshot(pid=1, steps=kw.pop("steps", 50), now=now, **kw)


def now(phase="data", phase_s=1.0, step_s=1.0, where="train.py:41 in main", waiting_in=None):
    return StepInProgress(step=51, phase=phase, phase_s=phase_s, step_s=step_s, still_s=phase_s, where=where,
                          waiting_in=waiting_in)


def test_the_bar_is_five_times_the_longest_step_and_never_under_the_floor():
    assert limit_s(None) == T.STALL_FLOOR.value == 20
    assert limit_s(100.0) == 20  # 5 x 0.1 s is under the floor
    assert limit_s(10_000.0) == 50  # a job with 10 s steps: 50 s
    assert T.STALL_FACTOR.value == 5 and "safety_factor" in T.STALL_FACTOR.source


@pytest.mark.parametrize("since, longest, stalled", [(19.9, 50.0, False), (20.1, 50.0, True),
                                                     (45.0, 10_000.0, False), (50.5, 10_000.0, True)])
def test_a_loop_is_stalled_past_its_bar(since, longest, stalled):
    s = check(snap(since_step_s=since, longest_step_ms=longest, now=now(phase_s=since, step_s=since)))
    assert s.stalled is stalled and s.quiet_s == since and not s.first_step


def test_before_its_first_step_a_wait_or_an_idle_loop_thread_is_a_stall():
    """Loading a dataset or compiling for minutes is work (the loop's thread busy); waiting that long
    for data, the GPU or a collective before any step is a hang, and so is a loop thread idle that
    long in any phase (issue 43 item 17: a lock, input(), a sleep read 'not enough data yet' for good)."""
    busy = ProcessSample(pid=1, loop_cpu=98.0)
    crowded = ProcessSample(pid=1, loop_cpu=6.0, loop_cpu_wait=60.0)  # (computing on a busy machine)
    idle = ProcessSample(pid=1, loop_cpu=0.0, loop_cpu_wait=0.0)
    for phase, stalled in (("data", True), ("comm", True), ("sync", True), ("other", False), ("forward", False)):
        for process in (None, busy, crowded):
            s = check(snap(steps=0, since_step_s=None, uptime_s=30.0, now=now(phase=phase, phase_s=25.0, step_s=None)),
                      process)
            assert s.stalled is stalled and s.first_step and not s.idle, (phase, process)
    for phase in ("other", "forward"):
        s = check(snap(steps=0, uptime_s=30.0, now=now(phase=phase, phase_s=25.0, step_s=None)), idle)
        assert s.stalled and s.idle and s.quiet_s == 25.0, phase
    short = check(snap(steps=0, uptime_s=19.0, now=now(phase="other", phase_s=19.0, step_s=None)), idle)
    assert not short.stalled and short.limit_s == T.STALL_FLOOR.value  # (the same floor as the stall bar)
    young = check(snap(steps=0, uptime_s=15.0, now=now(phase="other", phase_s=400.0, step_s=None)), idle)
    assert young.quiet_s == 15.0 and not young.stalled  # (never longer than the probe has run)
    assert check(snap(steps=0, now=None), idle) is None
    assert check(snap(state="exited", since_step_s=100.0)) is None


def test_a_loop_blocked_before_its_first_step_names_the_line_it_waits_on():
    stall = check(snap(steps=0, uptime_s=40.0, now=now(phase="other", phase_s=38.0, step_s=None,
                                                      where="train.py:12 in setup")),
                  ProcessSample(pid=1, loop_cpu=0.0))
    v = diagnose(Evidence(steps=0, stall=stall, now=now(phase="other", phase_s=38.0, step_s=None,
                                                        where="train.py:12 in setup"), loop_cpu=0.0))
    assert v.code == "stalled" and v.headline == "stalled: blocked before its first step at train.py:12 in setup"
    assert v.evidence.startswith("no step yet, blocked for 38 s (bar 20 s) at train.py:12 in setup")
    assert "a lock, input(), a sleep" in v.next_step


def test_ranks_that_hold_the_others_are_the_ones_outside_the_collective():
    r0 = RankRow(rank=0, pid=10, steps=20, since_step_s=40.0, longest_step_ms=30.0, now_phase="comm", now_phase_s=40.0)
    r1 = RankRow(rank=1, pid=11, steps=20, since_step_s=40.0, longest_step_ms=30.0, now_phase="other", now_phase_s=40.0)
    assert rank_check(r0) and rank_check(r1)
    holding, waiting = culprits([r0, r1])
    assert [r.rank for r in holding] == [1] and [r.rank for r in waiting] == [0]
    assert culprits([r1]) == ([], [])  # nobody waits in a collective: nobody holds anybody


def test_an_exception_is_found_at_the_end_of_a_traceback():
    log = ["step 9", "Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
           "    raise RuntimeError('boom')", "RuntimeError: boom at step 10", "[rank0]: done"]
    assert exception_in(log) == "RuntimeError: boom at step 10"
    oom = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity"]
    assert exception_in(oom).startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert exception_in(["all good", "UserWarning: careful"]) is None
    assert exception_in(["NCCL WARN Connection closed by remote peer"]).startswith("NCCL WARN")


def test_why_a_job_ended_from_what_tuimon_has():
    e = job_end(exit_code=1, probe_end="exception", probe_text="RuntimeError: boom\n  at train.py:3 in main",
                log="/tmp/job.log", log_tail=["x"])
    assert (e.how, e.exception, e.frames) == ("exception", "RuntimeError: boom", ["at train.py:3 in main"])
    assert e.headline == "exited with code 1: RuntimeError: boom"
    assert job_end(exit_code=-9, probe_end=None, probe_text="", log=None, log_tail=[]).headline == "killed by SIGKILL"
    clean = job_end(exit_code=None, probe_end="clean", probe_text="", log=None, log_tail=[])
    assert clean.how == "clean" and "known to its parent" in clean.headline
    unknown = job_end(exit_code=None, probe_end=None, probe_text="", log=None, log_tail=[])
    assert unknown.how == "unknown" and "OOM killer" in unknown.headline
    from_log = job_end(exit_code=1, probe_end=None, probe_text="", log="/l", log_tail=["ValueError: bad batch"])
    assert from_log.exception == "ValueError: bad batch" and from_log.how == "exception"


def test_the_exited_verdict_comes_first_and_says_why():
    end = job_end(exit_code=1, probe_end="exception", log=None, log_tail=[],
                  probe_text="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    v = diagnose(Evidence(steps=0, job_end=end))  # (no steps at all: still EXITED, never "wait for a few steps")
    assert v.code == "exited" and v.headline == "exited (code 1): torch.OutOfMemoryError"
    assert "CUDA out of memory" in v.evidence and v.next_step.startswith("the GPU ran out of memory")
    killed = diagnose(Evidence(steps=80, job_end=job_end(exit_code=-9, probe_end=None, probe_text="", log=None,
                                                         log_tail=[])))
    assert killed.headline == "exited: killed by SIGKILL" and "OOM killer" in killed.next_step


LOADER = """
def __next__():
    return _get_data()

def _get_data():
    return rebuild_storage_fd()

def rebuild_storage_fd():
    raise ConnectionResetError(104, "Connection reset by peer")
"""


def test_a_worker_that_died_while_handing_over_a_batch_is_named(tmp_path):
    """Beside two CPU burners a killed worker once surfaced as the socket's ConnectionResetError (its
    batch's shared memory is handed over on a socket) rather than torch's 'DataLoader worker ... exited
    unexpectedly': the probe writes the frame the job's line called (the DataLoader's __next__), and the
    verdict names the worker's death from it."""
    from tuimon.probe.present import PROBE_DIR, exception_text

    torch_dir = str(tmp_path / "site-packages" / "torch")
    code = compile(LOADER, torch_dir + "/utils/data/dataloader.py", "exec")
    loader: dict = {}
    exec(code, loader)
    wrapper: dict = {"orig_next": loader["__next__"]}  # the probe's DataLoader wrapper between the job and torch
    exec(compile("def __next__():\n    return orig_next()\n", PROBE_DIR + "torch_hooks.py", "exec"), wrapper)

    def job_loop():
        for _ in range(3):
            wrapper["__next__"]()  # (the job's own line)

    try:
        job_loop()
    except ConnectionResetError as e:
        text = exception_text(e, library=(torch_dir, PROBE_DIR))
    lines = text.splitlines()  # (tuimon/probe's own frames are library: the job's line is the test's)
    assert lines[0] == "ConnectionResetError: [Errno 104] Connection reset by peer"
    assert "test_present.py" in lines[1] and "in job_loop" in lines[1]
    assert lines[2].endswith("torch/utils/data/dataloader.py:3 in __next__"), lines
    assert lines[3].endswith("in rebuild_storage_fd") and lines[4].endswith("in _get_data"), lines  # (innermost)
    v = diagnose(Evidence(steps=80, job_end=job_end(exit_code=1, probe_end="exception", probe_text=text, log=None,
                                                    log_tail=[])))
    assert v.headline == "exited (code 1): ConnectionResetError" and v.next_step.startswith("a DataLoader worker died")
    elsewhere = text.replace("torch/utils/data/dataloader.py", "requests/adapters.py")  # (a socket of the job's own)
    v = diagnose(Evidence(steps=80, job_end=job_end(exit_code=1, probe_end="exception", probe_text=elsewhere,
                                                    log=None, log_tail=[])))
    assert "DataLoader" not in v.next_step


def test_the_stalled_verdict_names_the_phase_and_what_it_waits_for():
    stall = Stall(stalled=True, quiet_s=38.0, limit_s=20.0, phase="data", phase_s=38.0)
    base = dict(steps=6, data_share=0.14, stall=stall, now=now(phase_s=38.0, step_s=38.0), loop_cpu=0.0)
    dead = diagnose(Evidence(**base, workers=2, workers_alive=1, worker_states=[(7, "sleeping", 0.0)]))
    assert dead.code == "stalled" and dead.headline == "stalled: waiting for data"
    assert "no step for 38 s" in dead.evidence and "at train.py:41 in main" in dead.evidence
    assert dead.next_step.startswith("1 of 2 DataLoader workers died")
    io = diagnose(Evidence(**base, workers=2, workers_alive=2, worker_states=[(7, "disk-sleep", 0.0),
                                                                           (8, "sleeping", 0.0)]))
    assert "blocked in I/O" in io.next_step
    sync = diagnose(Evidence(**{**base, "stall": Stall(stalled=True, quiet_s=60.0, limit_s=20.0, phase="sync",
                                                       phase_s=60.0)}, gpm=True, sm_active=100.0, power_share=0.2))
    assert sync.headline == "stalled: waiting for the GPU" and "power 20% of its limit" in sync.evidence
    assert sync.confidence == "high"  # (3x its bar)
    stopped = diagnose(Evidence(**base, process_state="stopped"))
    assert stopped.headline == "stalled: the process is stopped" and "kill -CONT" in stopped.next_step


def test_a_stalled_job_of_ranks_names_the_rank_the_others_wait_for():
    stall = Stall(stalled=True, quiet_s=95.0, limit_s=20.0, phase="comm", phase_s=95.0)
    v = diagnose(Evidence(steps=20, data_share=0.0, stall=stall, ranks=2,
                          stalled_ranks=[(0, "comm", 95.0, "train.py:60 in step"), (1, "other", 95.0, "train.py:58")],
                          holding_ranks=[1], waiting_ranks=[(0, "all_reduce")]))
    assert v.code == "stalled" and v.headline == "stalled: rank 1 holds the others"
    assert v.next_step == "rank 1 never entered the collective rank 0 waits in (all_reduce): it is in other for 95 s"


def test_the_probe_leaves_out_the_same_warm_up_as_the_stall_rule():
    from tuimon.probe import core

    assert core.WARMUP_STEPS == T.STALL_WARMUP_STEPS.value


def test_on_nccl_the_waiting_rank_is_in_a_sync_and_the_one_behind_has_the_lowest_step():
    """NCCL queues a collective and returns: the waiting rank blocks later, in a sync; when every
    rank is in a wait, the rank whose step is lowest never reached the collective the others passed."""
    waits = RankRow(rank=0, pid=10, steps=18, since_step_s=40.0, now_phase="sync", now_phase_s=40.0,
                    collective="all_reduce")
    sleeps = RankRow(rank=1, pid=11, steps=15, since_step_s=40.0, now_phase="other", now_phase_s=40.0)
    holding, waiting = culprits([waits, sleeps])
    assert [r.rank for r in holding] == [1] and [r.rank for r in waiting] == [0]
    behind = RankRow(rank=1, pid=11, steps=15, since_step_s=40.0, now_phase="sync", now_phase_s=40.0)
    holding, waiting = culprits([waits, behind])
    assert [r.rank for r in holding] == [1] and [r.rank for r in waiting] == [0]
    level = RankRow(rank=1, pid=11, steps=18, since_step_s=40.0, now_phase="comm", now_phase_s=40.0)
    assert culprits([waits, level]) == ([], [waits, level])  # (the one missing is elsewhere)



def _inner():
    x = 0
    for _ in range(2000):
        x += 1
    return x


def _outer(stop):
    while not stop.is_set():
        _inner()  # CALLS_INNER
        for _ in range(2000):
            pass


def test_a_stack_dump_is_one_moment_of_the_loop():
    """Issue 43 item 25: `t` showed torn stacks, each frame read after sys._current_frames() while the
    loop moved on: a callee that had returned, under a caller already past the call. The dump is one
    moment: wherever the loop is, its callee sits under the caller's call line, down to the thread's
    bootstrap. (The reader's own stack is deep, and read first: the loop runs while it is read, as a
    switch interval of 1 us hands it the GIL.)"""
    import inspect
    import sys
    import threading

    from tuimon.probe.present import stack_dump

    call_line = next(i for i, line in enumerate(inspect.getsource(sys.modules[__name__]).splitlines(), 1)
                     if line.strip().endswith("# CALLS_INNER"))
    stop = threading.Event()
    loop = threading.Thread(target=_outer, args=(stop,), daemon=True)
    loop.start()
    torn: list = []
    inside = [0]

    def deep(n):
        if n:
            return deep(n - 1)
        for _ in range(300):
            lines = stack_dump(loop.ident).splitlines()
            at = next(k for k, line in enumerate(lines) if line.endswith("[the training loop]"))
            frames = []
            for line in lines[at + 1:]:
                if not line.startswith("    "):
                    break
                name, where = line.strip().rsplit(" (", 1)
                frames.append((name, int(where.rstrip(")").rsplit(":", 1)[1])))
            names = [name for name, _ in frames]
            if names[:1] == ["_inner"]:
                inside[0] += 1
                if frames[1] != ("_outer", call_line):
                    torn.append(frames[:3])
            if "_bootstrap" not in names or "_outer" not in names:
                torn.append(frames[:3])

    old, limit = sys.getswitchinterval(), sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    sys.setswitchinterval(1e-6)
    try:
        reader = threading.Thread(target=deep, args=(3000,))  # (newer than the loop: its stack is read first)
        reader.start()
        reader.join()
    finally:
        sys.setswitchinterval(old)
        sys.setrecursionlimit(limit)
        stop.set()
        loop.join()
    assert not torn, f"{len(torn)} torn stacks of 300, e.g. {torn[:3]}"
    assert inside[0] >= 30, "the loop was seldom seen inside its callee"


def test_the_step_in_progress_is_never_one_that_has_ended():
    """Issue 43 item 26: `now` is the probe's word of up to ~0.2 s ago, and named a step that had
    ended since (the steps drained and counted said so). The step in progress is then the next one,
    from that step's end, with no phase or line of the ended step's."""
    import time

    from tuimon.channel import SegmentReader, SegmentWriter
    from tuimon.channel import layout as L
    from tuimon.channel.control import ControlBlock, Now
    from tuimon.channel.fileview import MappedView
    from tuimon.channel.meta import JobMeta
    from tuimon.monitor.training import TrainingView
    from tuimon.sources.channel import ChannelSource

    w = SegmentWriter.create(JobMeta(argv=("train.py",)), 1 << 10)
    try:
        forward = w.intern("forward")
        t = time.monotonic_ns() - 5 * 10**9
        for k in range(1, 3):  # steps 1 and 2: a second each
            w.emit(L.STEP, 0, 0, 1, k, t + (k - 1) * 10**9, t + k * 10**9, 0.0)
        w.set_steps(2, t + 2 * 10**9)
        # the control thread says step 3 is in its forward, at 2.9 s ...
        ControlBlock(MappedView(w._mm, L.CONTROL_OFFSET)).write_now(Now(
            updated_ns=t + 29 * 10**8, step=3, source="optimizer", phase_id=forward, collective_id=0,
            phase_since_ns=t + 25 * 10**8, step_t0_ns=t + 2 * 10**9, moved_ns=t + 29 * 10**8, longest_ns=10**9,
            where="train.py:41 in main", waiting_in=""))
        view = TrainingView(ChannelSource(SegmentReader(w.path)))
        view.poll()
        said = view.snapshot().now
        assert (said.step, said.phase, said.where) == (3, "forward", "train.py:41 in main")
        # ... and step 3 ends at 3 s, before it says anything again: step 4 is in progress, since 3 s
        w.emit(L.STEP, 0, 0, 1, 3, t + 2 * 10**9, t + 3 * 10**9, 0.0)
        w.set_steps(3, t + 3 * 10**9)
        view.poll()
        snap = view.snapshot()
        n = snap.now
        assert snap.steps == 3 and n.step == 4, (snap.steps, n)
        assert n.phase == "other" and n.where is None and abs(n.step_s - 2.0) < 0.5, n
    finally:
        w.unlink()
