"""torch.nn.DataParallel (issue 43, item 2): its parts timed on the loop thread, its replicas' forwards
passing the probe's hooks at once, GPU time on the replicas' own streams (or unknown), and a verdict
that names it with DistributedDataParallel as the next step.

CI has no GPU, and on a CPU build DataParallel just calls the module (no device_ids) and
parallel_apply refuses to run. So the probe is tested at the boundary: DataParallel's own forward
runs with stand-ins for the functions it calls (scatter_kwargs, replicate, parallel_apply, gather: the
globals of torch/nn/parallel/data_parallel.py), the stand-in parallel_apply running each replica on
its own thread as torch's does; CUDA events are stand-ins that log the stream they go on. The same
code runs on two GPUs in tests/gpu/check_data_parallel.sh."""

import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from tests.conftest import seg_path
from tests.helpers.flat_evidence import flat_evidence
from tuimon.analysis import thresholds as T
from tuimon.analysis.steps import StepRecord
from tuimon.analysis.verdicts import VERDICTS, diagnose
from tuimon.channel import SegmentReader
from tuimon.channel import layout as L
from tuimon.model import DataParallelTimes
from tuimon.probe import data_parallel, state

MS = 1_000_000

DP_LOOP = """
import copy, json, os, sys, threading, time
import tuimon
assert tuimon.instrument().enabled
print("PID", os.getpid(), flush=True)
import torch
from torch import nn
import torch.nn.parallel.data_parallel  # (the package's attribute of that name is the function data_parallel)
dpmod = sys.modules["torch.nn.parallel.data_parallel"]

replica_calls = []  # per step: the probe's functions that ran on the replicas' threads
current = {}

def profile(frame, event, arg):
    if event == "call" and os.sep + "tuimon" + os.sep in frame.f_code.co_filename:
        name = frame.f_code.co_name
        with lock:
            current[name] = current.get(name, 0) + 1

lock = threading.Lock()
joining = [False]  # the loop waits in the replicas' join
looked = [0]  # ...and meanwhile the probe's line sampler looked for it from outside (its thread took the GIL)
from tuimon.probe import sampler as tuimon_sampler
line_now = tuimon_sampler.LoopSampler._line_now
def counted_line_now(self, ident):
    looked[0] += joining[0]
    return line_now(self, ident)
tuimon_sampler.LoopSampler._line_now = counted_line_now

def scatter_kwargs(inputs, kwargs, device_ids, dim=0):
    time.sleep(0.001)
    chunks = [x.chunk(len(device_ids)) for x in inputs]
    return tuple(tuple(c[i] for c in chunks) for i in range(len(device_ids))), tuple({} for _ in device_ids)

def replicate(module, device_ids, detach=False):
    time.sleep(0.003)
    return [module] + [copy.deepcopy(module) for _ in device_ids[1:]]

def parallel_apply(modules, inputs, kwargs_tup=None, devices=None):
    results = {}
    def worker(i):  # (as torch's _worker: the replica's forward on a thread of its own)
        sys.setprofile(profile)
        try:
            time.sleep(JOIN_S)
            results[i] = modules[i](*inputs[i])
        finally:
            sys.setprofile(None)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(modules))]
    [t.start() for t in threads]
    joining[0] = True
    [t.join() for t in threads]
    joining[0] = False
    return [results[i] for i in range(len(modules))]

def gather(outputs, output_device, dim=0):
    time.sleep(0.001)
    return torch.cat(outputs)

dpmod.scatter_kwargs, dpmod.replicate, dpmod.parallel_apply, dpmod.gather = scatter_kwargs, replicate, parallel_apply, gather
net = nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.ReLU()) for _ in range(8)])
model = nn.DataParallel(net)
# two "GPUs": the attributes DataParallel's forward reads (on the CPU build its __init__ sets none)
model.device_ids, model.output_device, model.src_device_obj, model.dim = [0, 1], 0, torch.device("cpu"), 0
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.MSELoss()
for i in range(STEPS):
    current.clear()
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    loss = loss_fn(model(x), y)  # the model's line
    loss.backward()
    opt.step()
    opt.zero_grad()
    replica_calls.append(dict(current))
print("RESULT", json.dumps({"replica_calls": replica_calls, "looked": looked[0], "dp_hooks": len(model._forward_pre_hooks)
                            + len(model._forward_hooks), "net_hooks": len(net._forward_pre_hooks)}), flush=True)
"""


def run_dp_loop(shm, steps: int, join_s: float):
    """The loop above: (the probe's values by step, what the loop saw, the hot lines' waiting samples by
    line)."""
    script = shm / "dp_loop.py"  # (a file: the sampler names lines of files, not of `python -c`)
    script.write_text(f"STEPS, JOIN_S = {steps}, {join_s}\n" + textwrap.dedent(DP_LOOP))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180,
                       env={**os.environ, "TUIMON_SHM_DIR": str(shm)})
    assert p.returncode == 0, p.stderr
    pid = int(p.stdout.split("PID ")[1].split()[0])
    result = json.loads(p.stdout.split("RESULT ", 1)[1])
    r = SegmentReader(seg_path(shm, pid))
    b = r.drain()
    by_step: dict[int, dict[str, float]] = {}
    waiting: dict[str, float] = {}
    for x in b.records:
        if x[0] in (L.PHASE, L.STEP_VALUE):
            by_step.setdefault(x[5], {})[r.name(x[3])] = x[8]
        elif x[0] == L.HOT and x[6] == L.HOW_WAITING:
            waiting[r.name(x[3])] = waiting.get(r.name(x[3]), 0) + x[8]
    return by_step, result, waiting


@pytest.fixture(scope="module")
def dp_loop(tmp_path_factory):
    """The loop above, run once for the tests that read it."""
    return run_dp_loop(tmp_path_factory.mktemp("shm"), 12, 0.006)


def test_dataparallels_parts_are_timed_on_the_loop_thread_inside_its_forward(dp_loop):
    """Each step says its replicate, scatter, parallel_apply (the replicas' join) and gather times and
    its GPUs; DataParallel's forward is the step's forward phase (timed by its class: no module hook
    on it or the model once the probe found its roots), holding the four parts."""
    by_step, result, _ = dp_loop
    steps = sorted(s for s in by_step if "dp.devices" in by_step[s])
    assert len(steps) >= 10, by_step
    for s in steps[4:]:  # (after the probe's discovery of the model's outermost calls)
        v = by_step[s]
        assert v["dp.devices"] == 2
        assert v["dp.replicate_ns"] >= 3 * MS and v["dp.scatter_ns"] >= 1 * MS, v
        assert v["dp.apply_ns"] >= 6 * MS and v["dp.gather_ns"] >= 1 * MS, v
        parts = sum(v[f"dp.{p}_ns"] for p in data_parallel.PARTS)
        assert parts <= v["forward"] <= parts + 20 * MS, v  # (the parts inside the forward phase)
    assert result["dp_hooks"] == 0 and result["net_hooks"] == 0, result


def test_the_replicas_forwards_pass_the_probes_hooks_at_their_first_check(dp_loop):
    """On the replicas' threads no function of the probe's runs once it found the model's roots; in
    its first steps only the global module hooks, each returning at its thread check."""
    _, result, _ = dp_loop
    calls = result["replica_calls"]
    assert set().union(*calls[:3]) <= {"_pre", "_post"}, calls[:3]
    assert all(not c for c in calls[4:]), calls


def test_the_line_sampler_leaves_the_replicas_the_gil_while_the_loop_waits_for_them(tmp_path):
    """The loop waits in the replicas' join 30 ms a step: the probe's line sampler does not look for it
    from outside then (its thread would take the GIL from the replicas 50 times a second); the join's
    time is counted as waiting samples at the line that called the model, as looking would have."""
    from tuimon.probe import sampler

    if sampler.native is None:
        pytest.skip("no native line sampler (the C extension is not built): it samples from outside anyway")
    by_step, result, waiting = run_dp_loop(tmp_path, 40, 0.03)
    joined_s = sum(v.get("dp.apply_ns", 0) for v in by_step.values()) / 1e9
    assert joined_s >= 1.2 and result["looked"] <= 2, (joined_s, result["looked"])
    at_model = sum(n for line, n in waiting.items() if "dp_loop.py:" in line and "loss_fn(model(x), y)" in line)
    assert at_model >= 0.8 * joined_s * sampler.HZ, (at_model, joined_s, waiting)


class FakeEvent:
    def __init__(self, log, clock):
        self.log, self.clock, self.at, self.done = log, clock, None, False

    def record(self, stream):
        self.log.append(stream)
        self.at = self.clock[0]

    def query(self):
        return self.done

    def elapsed_time(self, other):
        return other.at - self.at  # (ms, as torch's)


def fake_timing():
    log, clock, events = [], [0.0], []

    def event(enable_timing=False):
        events.append(FakeEvent(log, clock))
        return events[-1]

    cuda = SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True, Event=event,
                           current_stream=lambda device: f"cuda:{device}'s current stream")
    names: dict[str, int] = {}
    records: list[tuple] = []
    t = data_parallel.DataParallelTiming(SimpleNamespace(cuda=cuda), lambda *r: records.append(r),
                                         lambda n: names.setdefault(n, len(names) + 1), lambda: 1)
    t.gpu = SimpleNamespace(measuring=True)
    by_id = {}

    def values():
        by_id.update({v: k for k, v in names.items()})
        out: dict[int, dict[str, float]] = {}
        for r in records:
            out.setdefault(r[4], {})[by_id[r[2]]] = r[7]
        return out

    return t, log, clock, events, values


def test_gpu_time_goes_on_each_replicas_device_stream_and_is_never_waited_for():
    t, log, clock, events, values = fake_timing()
    starts = t.start_events([0, 1])
    assert log == ["cuda:0's current stream", "cuda:1's current stream"]
    clock[0] = 2.0
    t.end_events(7, starts)
    assert log[2:] == ["cuda:0's current stream", "cuda:1's current stream"]
    events[2].at, events[3].at = 3.0, 5.0  # (device 0's replica done 3 ms in, device 1's 5 ms)
    t.add(data_parallel.APPLY, 9 * MS, 2)
    t.close(7, 100, 1)
    assert values()[7] == {"dp.replicate_ns": 0.0, "dp.scatter_ns": 0.0, "dp.apply_ns": 9 * MS,
                           "dp.gather_ns": 0.0, "dp.devices": 2.0}  # (pending events: no GPU time yet)
    for e in events:
        e.done = True
    t.close(8, 200, 1)  # (nothing ran this step: only the pending pairs resolved)
    assert values()[7]["dp.gpu_ns"] == 5 * MS and 8 not in values()
    t.gpu.measuring = False  # a step the GPU timing does not measure: no events
    assert t.start_events([0, 1]) is None and len(log) == 4
    t2, _, _, _, _ = fake_timing()
    t2.gpu = None  # no CUDA events in this job: said by no dp.gpu_ns at all
    assert t2.start_events([0, 1]) is None


@pytest.fixture
def probe(monkeypatch):
    """A stand-in probe where the wrappers look for one: its DataParallel timing and its loop thread."""
    t, log, _, _, values = fake_timing()
    p = SimpleNamespace(dp=t, step_no=3, anatomy=SimpleNamespace(on_loop=lambda: p.loop))
    p.loop, p.log, p.values = True, log, values
    monkeypatch.setattr(state, "probe", p)
    return p


def test_the_method_wrappers_time_the_loop_thread_and_keep_the_methods_behaviour(probe):
    def parallel_apply(self, replicas, inputs, kwargs):
        return [r + i for r, i in zip(replicas, inputs, strict=True)]

    wrapped = data_parallel._part(parallel_apply, data_parallel.APPLY, lambda: False)
    model = SimpleNamespace(device_ids=[0, 1, 2])
    assert wrapped(model, [1, 2], [10, 20], None) == [11, 22]  # (two replicas of three GPUs)
    assert probe.dp.ns[data_parallel.APPLY] > 0 and probe.dp.devices == 3
    assert probe.log == ["cuda:0's current stream", "cuda:1's current stream"] * 2  # (a pair on each replica's GPU)
    assert probe.dp.pending[0][0] == 3

    def gather(self, outputs, device):
        raise RuntimeError("the job's own error")

    before = probe.dp.ns[data_parallel.GATHER]
    with pytest.raises(RuntimeError, match="the job's own error"):
        data_parallel._part(gather, data_parallel.GATHER, lambda: False)(model, [], 0)
    assert probe.dp.ns[data_parallel.GATHER] > before  # (timed all the same)
    probe.loop = False  # another thread calls it: straight through
    ns = list(probe.dp.ns)
    assert data_parallel._part(parallel_apply, data_parallel.APPLY, lambda: False)(model, [1], [2], None) == [3]
    assert probe.dp.ns == ns
    probe.loop = True
    probe.dp = SimpleNamespace(start_events=None, add=None)  # broken timing: never the job's problem
    assert wrapped(model, [1, 2], [10, 20], None) == [11, 22]


def test_the_window_says_dataparallels_shares_and_no_gpu_share_from_the_loops_stream():
    """Under DataParallel on 2+ GPUs the probe's events on the loop's stream see one device: the GPU
    share from them is unknown (None), not that reading; the replicas' own GPU time comes through."""
    from tuimon.monitor.training import _anatomy

    ids = {"forward": 1, "other": 2, "gpu.busy_ns": 3, "dp.replicate_ns": 4, "dp.scatter_ns": 5, "dp.apply_ns": 6,
           "dp.gather_ns": 7, "dp.devices": 8, "dp.gpu_ns": 9}
    name = {v: k for k, v in ids.items()}.__getitem__

    def step(k, dp=True):
        values = {3: 0.0025 * 40 * MS}
        if dp:
            values.update({4: 6 * MS, 5: 1 * MS, 6: 24 * MS, 7: 1 * MS, 8: 2.0})
            if k % 4 == 0:
                values[9] = 20 * MS
        return StepRecord(index=k, t0=k * 40 * MS, t1=(k + 1) * 40 * MS, phases={1: 32 * MS, 2: 8 * MS}, values=values)

    w = _anatomy([step(k) for k in range(1, 21)], name)
    assert w["gpu"] is None
    d = w["data_parallel"]
    assert (d.devices, d.steps, d.replicate_share, d.scatter_gather_share, d.apply_share) == (2, 20, 0.15, 0.05, 0.6)
    assert (d.replicate_ms, d.apply_ms, d.gpu_ms, d.gpu_steps) == (6.0, 24.0, 20.0, 5)
    assert d.own_share == pytest.approx(0.2)
    plain = _anatomy([step(k, dp=False) for k in range(1, 21)], name)
    assert plain["data_parallel"] is None and plain["gpu"].busy_share == 0.0025
    # steps that took no time (a clock that did not move): no shares of 0 ns (no division by it)
    still = [StepRecord(index=k, t0=k * MS, t1=k * MS, phases={1: 0, 2: 0}, values=step(k).values) for k in range(1, 21)]
    assert _anatomy(still, name)["data_parallel"] is None


def dp_times(own: float, apply: float = 0.6, devices: int = 2, gpu_ms: float | None = None) -> DataParallelTimes:
    return DataParallelTimes(devices=devices, steps=50, replicate_ms=own * 0.75 * 40, scatter_ms=own * 0.125 * 40,
                             apply_ms=apply * 40, gather_ms=own * 0.125 * 40, replicate_share=own * 0.75,
                             scatter_gather_share=own * 0.25, apply_share=apply, gpu_ms=gpu_ms,
                             gpu_steps=0 if gpu_ms is None else 12)


def evidence(dp, sm=60.0, **kw):
    return flat_evidence(steps=50, step_ms=40.0, data_share=0.01, phases={"forward": 0.85, "backward": 0.1,
                                                                          "other": 0.05},
                         sm_active=sm, gpm=True, cuda=True, loop_cpu=40.0, data_parallel=dp, **kw)


def rule_of(v):
    return next(r for r in v.rules if r.code == "data-parallel")


def test_the_thresholds_are_the_published_ones():
    assert (T.DP_OWN.value, T.DP_DEVICES.value, T.GPU_IDLE.value) == (0.10, 2, 50)
    assert "10%" in T.DP_OWN.source and "TensorBoard" in T.DP_OWN.source and T.DP_OWN.value == T.COMM_HIGH.value


def test_dataparallels_own_work_at_and_under_its_bar():
    """With the GPUs neither busy nor idle (SM 60%): its replicate, scatter and gather at 10% of the
    step fire it; at 9% they do not."""
    at = diagnose(evidence(dp_times(0.10)))
    assert at.code == "data-parallel", rule_of(at)
    assert at.headline == "DataParallel on 2 GPUs: replicate, scatter, gather 10% and the replicas' join 60% of the step"
    assert "replicate 8% (3.0 ms) · scatter+gather 2% (1.0 ms)" in at.evidence, at.evidence
    assert "waiting in the replicas' join (parallel_apply) 60% (24.0 ms)" in at.evidence
    assert "GPU time on the replicas' streams: unknown" in at.evidence
    assert at.next_step.startswith("DistributedDataParallel, one process per GPU (torchrun --nproc_per_node=2")
    under = diagnose(evidence(dp_times(0.09)))
    assert under.code != "data-parallel" and [c.passed for c in rule_of(under).checks] == [True, False, False]


def test_idle_gpus_under_dataparallel_fire_it_at_the_idle_bar():
    assert diagnose(evidence(dp_times(0.02), sm=49.0)).code == "data-parallel"
    at_bar = diagnose(evidence(dp_times(0.02), sm=50.0))
    assert at_bar.code != "data-parallel", rule_of(at_bar)


def test_unmeasured_gpus_read_as_host_bound_reads_them():
    """No GPU activity at all (no NVML; under DataParallel no events on the loop's stream count): where
    host-bound would fire, DataParallel does, whatever its own share."""
    given = dict(steps=50, step_ms=40.0, data_share=0.01, phases={"forward": 0.85, "backward": 0.1, "other": 0.05},
                 cuda=True, loop_cpu=40.0)
    assert diagnose(flat_evidence(**given)).code == "host-bound"
    v = diagnose(flat_evidence(**given, data_parallel=dp_times(0.02)))
    assert v.code == "data-parallel" and [c.passed for c in rule_of(v).checks] == [True, False, None]


def test_one_gpu_or_no_dataparallel_never_fires_it():
    one = diagnose(evidence(dp_times(0.5, devices=1), sm=10.0))
    assert one.code != "data-parallel" and rule_of(one).why.endswith("it calls the module itself")
    none = diagnose(evidence(None, sm=10.0))
    assert none.code != "data-parallel" and [c.passed for c in rule_of(none).checks] == [None, None, None]


def test_it_wins_over_host_bounds_launches_and_yields_to_a_busy_gpu():
    """The job of the issue: idle GPUs, thousands of small ops a step, the loop in the model: without
    DataParallel measured it is host-bound (launches); with it, DataParallel speaks, with its GPU time
    where the replicas' streams gave one. A busy GPU keeps its own verdict."""
    from tuimon.model import OpCounts

    ops = OpCounts(step=40, total=2603, by_phase={"forward": 2000, "backward": 600}, lines={})
    plain = diagnose(evidence(None, sm=12.0, ops=ops))
    assert (plain.code, plain.headline) == ("host-bound", "host-bound: launches and Python in the model")
    v = diagnose(evidence(dp_times(0.17, gpu_ms=21.5), sm=12.0, ops=ops))
    assert v.code == "data-parallel" and rule_of(v).fired and next(r for r in v.rules if r.code == "host-bound").fired
    assert "the replicas' forward 21.5 ms on their own GPUs' streams (the slowest; CUDA events, 12 steps)" in v.evidence
    order = list(VERDICTS)
    assert order.index("data-parallel") < order.index("host-bound") and order.index("data-parallel") > order.index(
        "healthy")
    busy = diagnose(evidence(dp_times(0.3), sm=95.0, tensor_active=70.0))
    assert busy.code in ("compute-bound", "healthy"), busy


def test_its_confidence_comes_from_its_own_work_from_the_bar_up_else_from_the_idle_gpus():
    """At 10% of the step, its own work decides how sure it is (at the bar: medium), though the GPUs
    are nearly idle (5%: clearly past the idle bar, which alone would say high)."""
    at = dp_times(0.10)
    assert at.own_share == 0.10  # (exactly the bar: the test is at the edge it means)
    for dp, confidence in ((at, "medium"), (dp_times(0.02), "high"), (dp_times(0.13), "high")):
        v = diagnose(evidence(dp, sm=5.0))
        assert (v.code, v.confidence) == ("data-parallel", confidence)
