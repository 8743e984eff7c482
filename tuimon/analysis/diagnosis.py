"""The verdict: which bottleneck the window of steps shows, the numbers that decided it, how sure
it is, and one next step from those numbers. Pure: Evidence in, Verdict out.

One rule per class, each listing its checks (value, threshold, where the threshold comes from:
thresholds.py), so a screen can show why every rule fired or did not. Precedence, first match:
  exited                    the process has ended: how and why, as far as tuimon can know
  stalled                   no step far beyond the loop's own history (analysis/stall.py): where it waits
  not enough data
  from outside              (no probe, `attach`) the GPU's activity (NVML) and the main thread's hot
                            lines (py-spy): the GPU's unit, or where the host holds it back
  straggler                 (2+ ranks) one rank's own work (its step less its waits in collectives)
                            is >= 1.43x the others': they wait for it, whatever their own anatomy says
  memory pressure           the caching allocator frees its cache and retries cudaMalloc in >= 1 step
                            in 20 (each retry drains the GPU): it hides behind every other class
  input-bound (high)        the loop waits >= 20% of the step for data: fix that first, it hides the rest
  copy-bound                >= 20% of the step in host-to-device copies (pageable memory blocks the loop)
  comm-bound                >= 10% of the step waits in collectives (the reduction is not hidden)
  GPU busy (SM >= 80%):     memory-bound | compute-bound | healthy, by which unit leads (Nsight
                            Compute's speed-of-light logic applied to GPM's DRAM and pipe activity)
  CPU-bound                 no CUDA work in the job: forward+backward+optimizer take most of the
                            step and the loop thread runs near a full core: the model computes on the CPU
  input-bound (moderate)    >= 5%, unless a part of the step 4x larger outranks it
  sync-bound                the loop blocks on device-to-host syncs (>= 20%, or >= 5% with the GPU
                            mostly idle and no part of the step 4x larger): host and GPU take turns
  host-bound                the GPU is mostly idle (SM < 50%) and the loop neither waits for data
                            nor for the GPU (or those waits are outranked): launches / Python in the
                            model, Python outside it, or a loop thread blocked somewhere tuimon does not see
Moderate shares rank by size: a moderate data wait or sync share yields to a part of the step
RANK_FACTOR (4x) larger, so the verdict names what holds the most of the step.
  no single bottleneck      none of the above (SM 50-80%): a capture (c) is the next look
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field

from ..model import CopyTimes, HotLine, JobEnd, Memory, OpCounts, StepInProgress, Straggler
from ..model.record import record
from ..model.vocab import Confidence, RuleCode, VerdictCode
from . import memory as mem
from . import thresholds as T
from .anatomy import how_of
from .present import exited_words, stalled_words
from .stall import Stall


@record
class Evidence:
    """The window's numbers the rules read. None: not measured."""

    has_channel: bool = True
    steps: int = 0
    step_ms: float | None = None
    data_share: float | None = None
    phases: dict[str, float] = field(default_factory=dict)  # share of step time per phase
    sync_per_step: float | None = None
    sync_share: float | None = None
    sync_mean_us: float | None = None
    sync_sites: list[tuple[str, float]] = field(default_factory=list)  # (file:line, per step)
    gpm: bool = False
    sm_active: float | None = None  # %, GPM, the target's GPUs over the window
    tensor_active: float | None = None
    fp32_active: float | None = None
    fp16_active: float | None = None
    dram_bw: float | None = None
    util_gpu: float | None = None  # %, the coarse kernel-running time (GPUs without GPM)
    pcie_rx: float | None = None  # bytes/s the GPU received over PCIe (GPM), over the window
    gpu_busy_events: float | None = None  # share of step time, a lower bound from CUDA events
    loop_cpu: float | None = None  # % of one core, the loop's thread
    loop_cpu_wait: float | None = None  # % of the time the loop's thread waited for a core
    job_cpu: float | None = None  # % of one core, the training process's threads together
    cuda: bool | None = None  # the job runs CUDA work (its CUDA events or allocator, or NVML sees it on a GPU);
    # None: not known
    cpus: int | None = None  # the machine's cores
    workers: int | None = None  # DataLoader num_workers
    workers_cpu: list[float] = field(default_factory=list)  # % per worker process
    kernels_per_step: float | None = None  # from the last capture
    kernel_us: float | None = None
    ranks: int = 0  # ranks of the job seen on this node (0: one process)
    straggler: Straggler | None = None
    comm_share: float | None = None  # share of step time in collectives (the job's, with ranks)
    comm_mb: float | None = None  # handed to collectives per step (this process)
    comm_gpu: bool = False  # comm time from CUDA events (else the loop thread's)
    # the present moment
    job_end: JobEnd | None = None  # the process has exited: how
    ran_as: str | None = None  # ...and the verdict of its last window while it ran ("input-bound: data wait 60%")
    stall: Stall | None = None  # the shown process's progress
    now: StepInProgress | None = None
    step_source: str | None = None
    process_state: str | None = None  # the training process's state (psutil: 'stopped', 'disk-sleep', ...)
    workers_alive: int | None = None  # DataLoader worker processes alive now
    worker_states: list[tuple[int, str, float | None]] = field(default_factory=list)  # (pid, state, CPU %)
    stalled_ranks: list[tuple[int | None, str | None, float | None, str | None]] = field(default_factory=list)
    # ^ (rank, phase, its time there, where) of every stalled rank
    holding_ranks: list[int | None] = field(default_factory=list)  # ranks the others wait for in a collective
    waiting_ranks: list[tuple[int | None, str | None]] = field(default_factory=list)  # (rank, its last collective)
    power_share: float | None = None  # the target GPUs' power over their limit, 0..1
    memory: Memory | None = None
    hot: list[HotLine] = field(default_factory=list)  # the loop thread's hottest lines (probe/sampler.py), largest first
    optimizer: str | None = None  # the lead optimizer: 'SGD foreach=False fused=False params=600'
    copies: CopyTimes | None = None  # host <-> GPU copies per step
    ops: OpCounts | None = None  # the ops of the last counted step (probe/ops.py)
    # a process without the probe (`attach`): hot holds its main thread's lines, sampled from outside
    outside: bool = False
    outside_samples: int = 0  # the main thread's samples (py-spy)
    outside_why: str | None = None  # why no lines from outside yet (py-spy's failure in words, too few samples)


@record(kw_only=False)
class Check:
    what: str
    value: str  # as shown; "n/a" when not measured
    test: str  # e.g. ">= 20%"
    passed: bool | None  # None: could not be checked
    source: str = ""


@record(kw_only=False)
class Rule:
    code: RuleCode
    title: str
    fired: bool
    checks: list[Check]
    why: str  # one sentence: why it fired, or what it lacked


@record(kw_only=False)
class Verdict:
    code: VerdictCode
    headline: str
    evidence: str  # the numbers that decided it
    next_step: str
    confidence: Confidence
    rules: list[Rule] = field(default_factory=list)


def pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0f}%"


def share(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0%}"


def _at_least(what: str, value: float | None, t: T.Threshold, fmt: Callable[[float | None], str] = share) -> Check:
    return Check(what, fmt(value), f">= {t.show()}", None if value is None else value >= t.value, t.source)


def _below(what: str, value: float | None, t: T.Threshold, fmt: Callable[[float | None], str] = share) -> Check:
    return Check(what, fmt(value), f"< {t.show()}", None if value is None else value < t.value, t.source)


def _margin(value: float | None, t: T.Threshold, above: bool = True) -> Confidence:
    """high when the deciding number is clearly past its threshold (by a quarter), else medium."""
    if value is None:
        return "low"
    far = value >= t.value * 1.25 if above else value <= t.value * 0.75
    return "high" if far else "medium"


MODEL = ("forward", "backward", "optimizer")


def _largest_part(e: Evidence, besides: str) -> tuple[str, float]:
    """The largest part of the step besides one phase: the model's compute (forward+backward+
    optimizer, one part as the verdicts name it) or any other phase."""
    parts = {"forward+backward+optimizer": sum(e.phases.get(p, 0.0) for p in MODEL)}
    parts.update((p, v) for p, v in e.phases.items() if p not in MODEL and p != besides)
    return max(parts.items(), key=lambda kv: kv[1])


def _outranked(e: Evidence, phase: str, value: float | None) -> Check:
    """Whether a moderate share holds: passed (it does) unless a part RANK_FACTOR times larger
    outranks it."""
    name, larger = _largest_part(e, phase)
    test = f"< {T.RANK_FACTOR.show()} (a larger part decides)"
    if not value:  # (nothing to outrank)
        return Check(f"{name} over {phase}", "n/a", test, None, T.RANK_FACTOR.source)
    return Check(f"{name} over {phase}", f"{larger / value:.1f}x ({share(larger)})", test,
                 larger < value * T.RANK_FACTOR.value, T.RANK_FACTOR.source)


class _Context:
    """What several rules share: the GPU activity measure, and which one it is."""

    def __init__(self, e: Evidence):
        self.e = e
        self.busy: float | None  # % (None: not measured)
        if e.sm_active is not None:
            self.busy, self.busy_name, self.busy_note = e.sm_active, "SM activity", ""
        elif e.util_gpu is not None:  # kernel-running time: a GPU running one tiny kernel reads 100%
            self.busy, self.busy_name, self.busy_note = e.util_gpu, "GPU util (coarse)", " (coarse: no GPM)"
        elif e.gpu_busy_events is not None:
            self.busy, self.busy_name = 100 * e.gpu_busy_events, "GPU busy (CUDA events, a lower bound)"
            self.busy_note = ""
        else:
            self.busy, self.busy_name, self.busy_note = None, "GPU activity", " (no GPU metrics)"
        compute: list[tuple[float, str]] = [(v, n) for v, n in ((e.tensor_active, "tensor"), (e.fp32_active, "FP32"),
                                                                (e.fp16_active, "FP16")) if v is not None]
        self.compute: float | None
        self.compute, self.compute_name = max(compute) if compute else (None, "compute")

    def busy_check(self, t: T.Threshold = T.GPU_BUSY) -> Check:
        return _at_least(self.busy_name, self.busy, t, pct)

    def gpu_words(self) -> str:
        return f"{self.busy_name} {pct(self.busy)}{self.busy_note}"


# -- the rules ------------------------------------------------------------------------------------


def rule_exited(c: _Context) -> Rule:
    e = c.e
    end = e.job_end
    check = Check("the process", "exited" if end else "alive", "exited", end is not None)
    return Rule("exited", "Exited", end is not None, [check], end.headline if end else "the process is alive")


def rule_stalled(c: _Context) -> Rule:
    e, s = c.e, c.e.stall
    what = "time in its open phase, no step yet" if s and s.first_step else "time since the last step"
    bar = f"{s.limit_s:,.1f} s: " if s is not None else ""
    check = Check(what, "n/a" if s is None else f"{s.quiet_s:,.1f} s",
                  f"> {bar}{T.STALL_FACTOR.show()} the longest step so far, at least {T.STALL_FLOOR.show()}",
                  None if s is None else s.stalled, f"{T.STALL_FACTOR.source}; floor: {T.STALL_FLOOR.source}")
    checks = [check]
    ranks = Check("ranks stalled", str(len(e.stalled_ranks)), ">= 1", bool(e.stalled_ranks)) if e.ranks >= 2 else None
    if ranks is not None:
        checks.append(ranks)
    stopped = e.process_state == "stopped"
    if stopped:
        checks.append(Check("process state", "stopped", "stopped", True))
    fired = bool(s and s.stalled) or bool(e.stalled_ranks) or stopped
    if stopped:
        why = "the process is stopped (SIGSTOP): it makes no progress until it is continued"
    elif s is None:
        why = "the loop has not said what it is doing yet"
    elif s.first_step:
        why = f"no step yet; {s.phase or 'its phase'} for {s.quiet_s:,.1f} s"
    else:
        why = f"{s.quiet_s:,.1f} s since the last step; the bar is {s.limit_s:,.1f} s"
    return Rule("stalled", "Stalled (no progress far beyond the loop's own steps)", fired, checks, why)


def rule_waiting(c: _Context) -> Rule:
    e = c.e
    check = _at_least("steps in the window", e.steps, T.MIN_STEPS, lambda v: f"{v}")
    if not e.has_channel:
        if e.outside:
            return Rule("waiting", "Not enough data", False, [check], "no channel: judged from outside (next rule)")
        return Rule("waiting", "Not enough data", True, [check], "no channel: the loop's own timings need the probe")
    fired = e.steps < T.MIN_STEPS.value or e.data_share is None
    return Rule("waiting", "Not enough data", fired, [check],
                f"{e.steps} step{'s' if e.steps != 1 else ''} seen" if fired else "enough steps")


def rule_input(c: _Context, high: bool) -> Rule:
    e = c.e
    t = T.INPUT_HIGH if high else T.INPUT_MODERATE
    check = _at_least("data wait", e.data_share, t)
    checks = [check] if high else [check, _outranked(e, "data", e.data_share)]
    fired = bool(check.passed) and checks[-1].passed is not False
    if fired:
        why = f"the loop waits {share(e.data_share)} of the step for batches"
    elif e.data_share is None:
        why = "data wait not measured"
    elif check.passed:
        why = f"data wait {share(e.data_share)} is moderate, and {checks[-1].what.split(' over ')[0]} is {checks[-1].value}"
    else:
        why = f"data wait {share(e.data_share)} is under {t.show()}"
    return Rule("input-high" if high else "input-moderate", f"Input-bound ({'high' if high else 'moderate'})", fired,
                checks, why)


def rule_copy(c: _Context) -> Rule:
    e = c.e
    check = _at_least("time in host-to-device copies", e.copies.share if e.copies else None, T.COPY_HIGH)
    fired = bool(check.passed)
    cp = e.copies
    return Rule("copy-bound", "Copy-bound (host-to-device copies)", fired, [check],
                f"the loop spends {share(cp.share)} of the step copying {cp.h2d_mb:,.1f} MB to the GPU" if cp
                else "no host-to-device copies seen")


def rule_straggler(c: _Context) -> Rule:
    e, s = c.e, c.e.straggler
    check = _at_least("slowest rank's own work / the others'", s.ratio if s else None, T.STRAGGLER,
                      lambda v: "n/a" if v is None else f"{v:.2f}x")
    fired = e.ranks >= 2 and bool(check.passed)
    if s is None:
        why = "one process" if e.ranks < 2 else "fewer than two ranks with enough steps"
    else:
        measured = s.others_measured_ms
        why = (f"rank {s.rank} works {s.own_ms:.1f} ms/step, the others {s.others_ms:.1f}"
               + (f" (they measure {measured:.1f}, which holds what their wait does to them: analysis/ranks.py)"
                  if measured is not None and measured - s.others_ms >= 0.05 else "")
               + f": {s.ratio:.2f}x")
    return Rule("straggler", "Straggler (one rank holds the others back)", fired, [check], why)


def rule_memory(c: _Context) -> Rule:
    """The allocator retried (emptied its cache and called cudaMalloc again) often enough to cost
    steps, or the job caught out-of-memory errors and went on."""
    m = c.e.memory
    rate = m.retries_per_step if m else None
    retries = _at_least("allocator retries per step", rate, T.MEMORY_RETRIES,
                        lambda v: "n/a" if v is None else f"{v:.2f}")
    ooms = m.ooms_in_window if m else None
    caught = Check("out-of-memory errors caught in the window", "n/a" if ooms is None else str(ooms), ">= 1",
                   None if ooms is None else ooms >= 1)
    share = mem.peak_share(m) if m else None
    full = Check("peak of live tensors, of what the allocator may use", share_text(share),
                 f">= {T.MEMORY_FULL.show()}: full; below: fragmented", None if share is None else share >= T.MEMORY_FULL.value,
                 T.MEMORY_FULL.source)
    fired = bool(retries.passed) or bool(caught.passed)
    if m is None:
        why = "no allocator gauges (a job on the CPU, or none read yet)"
    elif rate is None:
        why = "retries per step not measured yet (two reads of the gauges a step apart)"
    else:
        why = (f"{rate:.2f} retries per step over steps {m.retries_from}..{m.retries_to}"
               + (f", {ooms} out-of-memory errors caught" if ooms else ""))
    return Rule("memory-pressure", "Memory pressure (the allocator frees its cache and retries)", fired,
                [retries, caught, full], why)


def share_text(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0%}"


def rule_comm(c: _Context) -> Rule:
    e = c.e
    check = _at_least("time in collectives", e.comm_share, T.COMM_HIGH)
    fired = bool(check.passed)
    return Rule("comm-bound", "Communication-bound", fired, [check],
                f"{share(e.comm_share)} of the step waits in collectives" if e.comm_share is not None
                else "no collectives seen")


def rule_gpu_unit(c: _Context, code: RuleCode) -> Rule:
    """memory-bound / compute-bound / healthy, among steps where the GPU is busy."""
    e = c.e
    busy = c.busy_check()
    lead_dram = None if e.dram_bw is None or c.compute is None else e.dram_bw - c.compute
    if code == "memory-bound":
        checks = [busy, _at_least("DRAM bandwidth", e.dram_bw, T.UNIT_BOUND, pct),
                  Check(f"DRAM over {c.compute_name}", "n/a" if lead_dram is None else f"{lead_dram:+.0f} points",
                        f">= +{T.UNIT_LEAD.show()}", None if lead_dram is None else lead_dram >= T.UNIT_LEAD.value,
                        T.UNIT_LEAD.source)]
        title = "GPU memory-bound (DRAM)"
    elif code == "compute-bound":
        checks = [busy, _at_least(f"{c.compute_name} pipe activity", c.compute, T.UNIT_BOUND, pct),
                  Check(f"{c.compute_name} over DRAM", "n/a" if lead_dram is None else f"{-lead_dram:+.0f} points",
                        f">= +{T.UNIT_LEAD.show()}", None if lead_dram is None else -lead_dram >= T.UNIT_LEAD.value,
                        T.UNIT_LEAD.source)]
        title = "GPU compute-bound"
    else:
        checks = [busy]
        title = "Healthy (GPU busy, no unit saturated)"
    fired = all(ch.passed for ch in checks)
    if code == "healthy":
        fired = bool(busy.passed)  # (after memory- and compute-bound, in precedence)
    if busy.passed is None:
        why = "GPU activity not measured (no GPU metrics): the GPU's side cannot be judged"
    elif busy.passed:
        why = f"{c.gpu_words()}; DRAM {pct(e.dram_bw)}, {c.compute_name} {pct(c.compute)}"
    else:
        why = f"{c.gpu_words()} is under {T.GPU_BUSY.show()}: the GPU is not the bottleneck"
    return Rule(code, title, fired, checks, why)


def rule_sync(c: _Context) -> Rule:
    e = c.e
    high = _at_least("time blocked in syncs", e.sync_share, T.SYNC_HIGH)
    moderate = _at_least("time blocked in syncs", e.sync_share, T.SYNC_MODERATE)
    idle = _below(c.busy_name, c.busy, T.GPU_IDLE, pct)
    not_busy = _below(c.busy_name, c.busy, T.GPU_BUSY, pct)
    ranked = _outranked(e, "sync", e.sync_share)
    fired = bool(not_busy.passed is not False
                 and (high.passed or (moderate.passed and idle.passed and ranked.passed is not False)))
    checks = [high, Check("...or", "", f">= {T.SYNC_MODERATE.show()} with the GPU idle, not outranked", None), idle,
              ranked, not_busy]
    n = f"{e.sync_per_step:.0f} per step" if e.sync_per_step is not None else "none seen"
    return Rule("sync-bound", "Sync-bound (host and GPU take turns)", fired, checks,
                f"blocked {share(e.sync_share)} of the step in syncs ({n}) with {c.gpu_words()}" if fired
                else "syncs not measured" if e.sync_share is None else f"syncs take {share(e.sync_share)} of the step ({n})")


def rule_host(c: _Context) -> Rule:
    e = c.e
    idle = _below(c.busy_name, c.busy, T.GPU_IDLE, pct)
    data = _small_or_outranked(e, "data wait", "data", e.data_share, T.INPUT_MODERATE, T.INPUT_HIGH)
    sync = _small_or_outranked(e, "time blocked in syncs", "sync", e.sync_share, T.SYNC_MODERATE, T.SYNC_HIGH)
    fired = idle.passed is not False and bool(data.passed) and sync.passed is not False
    return Rule("host-bound", "Host-bound (the GPU waits for Python)", fired, [idle, data, sync],
                f"{c.gpu_words()} while the loop neither waits for data nor for the GPU, or a part of the step "
                f"{T.RANK_FACTOR.show()} larger outranks those waits" if fired
                else "the GPU is not idle enough, or the loop waits for data or syncs")


def _small_or_outranked(e: Evidence, what: str, phase: str, value: float | None, moderate: T.Threshold,
                        high: T.Threshold) -> Check:
    """A wait under its moderate bar, or a moderate one that a part of the step RANK_FACTOR times
    larger outranks (a high one never yields)."""
    small = _below(what, value, moderate)
    if value is None or small.passed is not False:  # (None: not measured, and small says so)
        return small
    ranked = _outranked(e, phase, value)
    return Check(what, small.value, f"{small.test}, or under {high.show()} and outranked ({ranked.value})",
                 value < high.value and ranked.passed is False, f"{moderate.source}; {T.RANK_FACTOR.source}")


def rule_cpu(c: _Context) -> Rule:
    """A job without CUDA work whose model compute takes most of the step on a loop thread near a
    full core: the CPU's arithmetic is the limit."""
    e = c.e
    no_cuda = Check("CUDA work of the job (CUDA events, allocator, NVML)",
                    "n/a" if e.cuda is None else "seen" if e.cuda else "none seen", "none",
                    None if e.cuda is None else not e.cuda)
    idle = _below(c.busy_name, c.busy, T.GPU_IDLE, pct)
    model = sum(e.phases.get(p, 0.0) for p in MODEL) if e.phases else None
    compute = _at_least("forward+backward+optimizer", model, T.MODEL_MAJORITY)
    wants, _ = _loop_cpu(e)
    loop = _at_least("loop thread CPU (+ waiting for a core)", wants, T.LOOP_CPU_BUSY, pct)
    fired = bool(no_cuda.passed) and idle.passed is not False and bool(compute.passed) and bool(loop.passed)
    if fired:
        why = f"no CUDA work; forward+backward+optimizer {share(model)} of the step with the loop thread at {pct(wants)}"
    elif e.cuda is not False:
        why = "the job runs CUDA work: the GPU rules judge it" if e.cuda else "whether the job runs CUDA work is not known"
    else:
        why = (f"no CUDA work; forward+backward+optimizer {share(model)} of the step, loop thread {pct(wants)}: "
               "not both at their bars")
    return Rule("cpu-bound", "CPU-bound (the model computes on the CPU)", fired, [no_cuda, idle, compute, loop], why)


def _loop_cpu(e: Evidence) -> tuple[float | None, str]:
    """The loop thread's CPU with the time it waited for a core (on a busy machine it would have
    run then), and those in words."""
    wait = e.loop_cpu_wait if e.loop_cpu_wait is not None and e.loop_cpu_wait >= 0.5 else 0.0
    if e.loop_cpu is None:
        return None, "loop thread CPU not read yet"
    return e.loop_cpu + wait, f"loop thread at {e.loop_cpu:.0f}% CPU" + (f" + {wait:.0f}% waiting for a core" if wait else "")


# -- the verdict ----------------------------------------------------------------------------------


def diagnose(e: Evidence) -> Verdict:
    c = _Context(e)
    rules = {
        "exited": rule_exited(c),
        "stalled": rule_stalled(c),
        "waiting": rule_waiting(c),
        "outside": rule_outside(c),
        "straggler": rule_straggler(c),
        "memory-pressure": rule_memory(c),
        "input-high": rule_input(c, high=True),
        "copy-bound": rule_copy(c),
        "comm-bound": rule_comm(c),
        "memory-bound": rule_gpu_unit(c, "memory-bound"),
        "compute-bound": rule_gpu_unit(c, "compute-bound"),
        "healthy": rule_gpu_unit(c, "healthy"),
        "cpu-bound": rule_cpu(c),
        "input-moderate": rule_input(c, high=False),
        "sync-bound": rule_sync(c),
        "host-bound": rule_host(c),
    }
    shown = list(rules.values())
    for key, rule in rules.items():
        if rule.fired:
            return _verdict(key, c, shown)
    name, largest = _largest_part(e, "data")
    return Verdict("mixed", "no single bottleneck",
                   f"{c.gpu_words()} · data wait {share(e.data_share)} · syncs {share(e.sync_share)}"
                   + (f" · {name} {share(largest)}" if largest else ""),
                   "no rule fired: c captures a window to see the top kernels and operators", "low", shown)


def _verdict(key: str, c: _Context, rules: list[Rule]) -> Verdict:
    e = c.e
    gpu = c.gpu_words()
    low_gpu = c.busy is None or c.busy_note  # no GPM: the GPU side is guessed
    if key == "exited":
        return _exited_verdict(c, rules)
    if key == "stalled":
        return _stalled_verdict(c, rules)
    if key == "outside":
        return _outside_verdict(c, rules)
    if key == "waiting":
        if not e.has_channel:
            return Verdict("waiting", "no loop timings", "this process has no tuimon channel",
                           "restart it with `tuimon run -- <command>` (or call tuimon.instrument()) for its steps",
                           "low", rules)
        return Verdict("waiting", "not enough data yet",
                       f"{e.steps} step{'s' if e.steps != 1 else ''} seen; a verdict needs {T.MIN_STEPS.value:g}",
                       "wait for a few steps (a step is the loop's optimizer.step(), else its backward(), its model "
                       "call or its DataLoader's next(); tuimon.step() marks one by hand)", "low", rules)
    if key == "straggler" and e.straggler is not None:  # (always set here: the rule fired on its ratio)
        return _straggler_verdict(c, e.straggler, rules)
    if key == "memory-pressure":
        return _memory_verdict(c, rules)
    if key == "copy-bound" and e.copies is not None:  # (always set here: the rule fired on its share)
        return _copy_verdict(c, e.copies, rules)
    if key == "comm-bound":
        how = "GPU time, CUDA events" if e.comm_gpu else "on the loop thread"
        mb = f" · {e.comm_mb:,.0f} MB through collectives per step" if e.comm_mb else ""
        job = f" (the mean of {e.ranks} ranks)" if e.ranks >= 2 else ""
        return Verdict("comm-bound", "comm-bound: the step waits in collectives",
                       f"{share(e.comm_share)} of the step in collectives{job} ({how}){mb} · {gpu}",
                       "the gradient reduction is not hidden behind backward: more work per reduction (a larger batch "
                       "per GPU, or gradient accumulation under no_sync()), bf16 gradient compression (a DDP comm "
                       "hook), larger buckets (bucket_cap_mb), or a faster interconnect",
                       _margin(e.comm_share, T.COMM_HIGH), rules)
    if key in ("input-high", "input-moderate"):
        high = key == "input-high"
        return Verdict("input-bound", "input-bound" if high else "input-bound (moderate)",
                       f"data wait {share(e.data_share)} of step time (>= {(T.INPUT_HIGH if high else T.INPUT_MODERATE).show()}"
                       f" is {'high' if high else 'moderate'}) · {gpu}",
                       _input_next_step(e), _margin(e.data_share, T.INPUT_HIGH if high else T.INPUT_MODERATE), rules)
    if key == "memory-bound":
        return Verdict("memory-bound", "GPU memory-bound",
                       f"{gpu} · DRAM {pct(e.dram_bw)} · {c.compute_name} {pct(c.compute)}",
                       f"DRAM {pct(e.dram_bw)} while tensor {pct(e.tensor_active)} and FP32 {pct(e.fp32_active)}: the "
                       "kernels move bytes more than they compute: fuse elementwise ops (torch.compile), bf16 to halve "
                       "the bytes, larger batches",
                       _margin(e.dram_bw, T.UNIT_BOUND), rules)
    if key == "compute-bound":
        if c.compute_name == "tensor":
            step = (f"tensor cores {pct(c.compute)} busy: the math itself is the limit: FP8 (Transformer Engine), "
                    "fewer FLOPs, or a larger GPU")
        else:
            step = (f"{c.compute_name} pipes {pct(c.compute)} busy, tensor cores {pct(e.tensor_active)}: move the math "
                    "to tensor cores (bf16 autocast, or TF32: torch.backends.cuda.matmul.allow_tf32 = True)")
        return Verdict("compute-bound", f"GPU compute-bound ({c.compute_name})",
                       f"{gpu} · {c.compute_name} {pct(c.compute)} · DRAM {pct(e.dram_bw)}", step,
                       _margin(c.compute, T.UNIT_BOUND), rules)
    if key == "healthy":
        units = f" · DRAM {pct(e.dram_bw)} · {c.compute_name} {pct(c.compute)}" if not c.busy_note else ""
        return Verdict("healthy", "healthy: the GPU is busy", f"{gpu}{units} · data wait {share(e.data_share)}",
                       "nothing in the loop to fix; kernel efficiency is Nsight Compute's job: c captures the top "
                       "kernels" + ("" if not c.busy_note else "; without GPM this GPU's busy time is coarse"),
                       "low" if low_gpu else _margin(c.busy, T.GPU_BUSY), rules)
    if key == "cpu-bound":
        return _cpu_verdict(c, rules)
    if key == "sync-bound":
        sites = ", ".join(f"{site} ({n:.0f}/step)" for site, n in e.sync_sites[:3])
        per = f"{e.sync_per_step:.0f} sync{'s' if e.sync_per_step != 1 else ''} per step" if e.sync_per_step else "syncs"
        mean = f" ({e.sync_mean_us:,.0f} us each)" if e.sync_mean_us else ""
        return Verdict("sync-bound", "sync-bound",
                       f"blocked {share(e.sync_share)} of the step in {per}{mean} · {gpu}",
                       f"{per}{' at ' + sites if sites else ''}: the host waits for the GPU, then the GPU waits for the "
                       "host: keep values on the GPU and read them every N steps, or copy with non_blocking=True",
                       "low" if low_gpu else _margin(e.sync_share, T.SYNC_HIGH), rules)
    return _host_verdict(c, rules)


STRAGGLER_FIX: dict[str, str] = {  # by the phase it is slowest in, beyond the others (comm: the wait itself)
    "data": "its batches come slower: its DataLoader workers, its share of the data, or its storage",
    "copy": "its host-to-device copies take longer: pinned memory (DataLoader pin_memory=True) and non_blocking=True "
            "on that rank, or a slower PCIe link (g)",
    "forward": "uneven work (batch or sequence sizes per rank) or a slower GPU: compare its SM activity, clocks and "
               "throttle reasons (g)",
    "backward": "uneven work (batch or sequence sizes per rank) or a slower GPU: compare its SM activity, clocks and "
                "throttle reasons (g)",
    "optimizer": "its optimizer step is slower: uneven parameter shards, or a slower GPU (g)",
    "sync": "it blocks in device-to-host syncs the others do not make (logging or metrics on one rank)",
    "other": "time outside the model on that rank only (Python, I/O, logging, checkpointing or evaluation on one "
             "rank): spread it, or move it off the step",
}


def _straggler_verdict(c: _Context, s: Straggler, rules: list[Rule]) -> Verdict:
    e = c.e
    top = next(iter(s.slower.items()), None)
    where = f" · its {top[0]} +{top[1]:.1f} ms/step" if top else ""
    fix = STRAGGLER_FIX.get(top[0], "") if top else ""
    return Verdict("straggler", f"straggler: rank {s.rank}, {s.ratio:.1f}x the others' own work",
                   f"rank {s.rank} works {s.own_ms:.1f} ms/step, the others {s.others_ms:.1f} and wait for it "
                   f"in collectives{where} · job comm {share(e.comm_share)}",
                   f"rank {s.rank}: {fix}" if fix else f"rank {s.rank} is slower in every phase: compare its GPU (g) "
                   "and its CPU", _margin(s.ratio, T.STRAGGLER), rules)


def _memory_verdict(c: _Context, rules: list[Rule]) -> Verdict:
    """What the retries cost, whether the memory is full or fragmented, and the fix that fits."""
    e, m = c.e, c.e.memory
    assert m is not None  # (the rule fired on its retries)
    rate = m.retries_per_step or 0.0
    share = mem.peak_share(m)
    cap = f"the cap of {mem.gib(m.limit)}" if m.limit else mem.gib(m.total)
    parts = [f"{rate:.2f} allocator retries per step" + (f" (steps {m.retries_from}..{m.retries_to})" if m.retries_to else "")]
    if m.ooms_in_window:
        parts.append(f"{m.ooms_in_window} out-of-memory errors caught")
    parts.append(f"peak {mem.gib(m.peak_allocated)} of {cap}" + (f" ({share:.0%})" if share is not None else ""))
    parts.append(f"reserved {mem.gib(m.reserved)}, allocated {mem.gib(m.allocated)}")
    if m.inactive_split:
        parts.append(f"{mem.gib(m.inactive_split)} in split blocks not in use")
    if e.gpu_busy_events is not None:  # each retry waits for the GPU to drain, then cudaFree/cudaMalloc
        parts.append(f"GPU idle up to {1 - e.gpu_busy_events:.0%} of the step (CUDA events)")
    cost = ("each retry waits for the GPU to finish everything queued and returns the cache to CUDA (cudaFree), "
            "then cudaMalloc again, inside forward or backward")
    real = ("smaller batches, activation checkpointing (torch.utils.checkpoint) or a smaller dtype (bf16 autocast) "
            "for fewer live bytes")
    if m.expandable:
        step = f"live tensors need more than the allocator has, with expandable segments already on: {real}"
    elif share is not None and share < T.MEMORY_FULL.value:
        step = (f"the live tensors peak at {share:.0%} of {cap}: the memory is there, cached in blocks of the wrong "
                "sizes (fragmentation): PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets the allocator grow and "
                f"reuse one segment; if they stay, {real}")
    else:
        step = (f"the live tensors fill {share_text(share)} of {cap}: {real}; PYTORCH_CUDA_ALLOC_CONF="
                "expandable_segments:True also removes the retries that fragmentation adds")
    return Verdict("memory-pressure", "memory pressure: the allocator retries", " · ".join(parts),
                   f"{step} ({cost})", _margin(rate, T.MEMORY_RETRIES) if rate else "medium", rules)


def _input_next_step(e: Evidence) -> str:
    if e.workers == 0:
        return "num_workers=0: the loop makes its own batches: DataLoader(num_workers=N) loads them in parallel"
    if e.workers and e.workers_cpu:
        mean = sum(e.workers_cpu) / len(e.workers_cpu)
        if mean >= T.WORKERS_BUSY.value:
            return (f"num_workers={e.workers} and the workers at {mean:.0f}% CPU: more workers (cores allowing) "
                    "or cheaper transforms")
        return (f"num_workers={e.workers}, the workers at {mean:.0f}% CPU (not busy): they wait on I/O: faster "
                "storage, cached or pre-decoded data, a larger prefetch_factor")
    return "the loop waits for batches: more DataLoader workers, or cheaper transforms"


def _host_verdict(c: _Context, rules: list[Rule]) -> Verdict:
    """Which host work the GPU waits for, from the phases: the model's own calls (launches and the
    Python around them), or time outside every phase (_outside_model_verdict).
    (The loop thread's CPU cannot judge the model phases: on CUDA, backward runs in autograd's own
    thread while the loop waits.)"""
    e = c.e
    model = sum(e.phases.get(p, 0.0) for p in MODEL)
    other = e.phases.get("other", 0.0)
    confidence: Confidence = "low" if c.busy is None else _margin(c.busy, T.GPU_IDLE, above=False)
    if other > model:
        return _outside_model_verdict(c, rules, model, other, confidence)
    _, cpu = _loop_cpu(e)
    gpu = c.gpu_words()
    opt, largest = e.phases.get("optimizer", 0.0), max(e.phases.get(p, 0.0) for p in ("forward", "backward", "optimizer"))
    if opt and opt == largest:  # the optimizer's step is the model's largest part
        return Verdict("host-bound", "host-bound: the optimizer step",
                       f"{gpu} · optimizer {share(opt)} of the step (forward+backward+optimizer {share(model)}) · {cpu}"
                       + (f" · {e.optimizer}" if e.optimizer else ""), _optimizer_step(e, opt), confidence, rules)
    if c.busy is None:  # no GPU in sight (neither NVML nor the job's CUDA events): the model's work is on the CPU
        return Verdict("host-bound", "host-bound: the model's work on the CPU",
                       f"{gpu} · forward+backward+optimizer {share(model)} of the step on the CPU · {cpu}",
                       "no GPU seen (neither NVML nor CUDA events): the model computes on the CPU: a GPU "
                       "(model.to('cuda')) if there is one, else cheaper CPU work: torch.compile, larger batches (fewer, "
                       "larger ops), torch.set_num_threads(the cores it has)", confidence, rules)
    ops_in = sum(e.ops.by_phase.get(p, 0) for p in ("forward", "backward", "optimizer")) if e.ops else 0
    if e.ops is not None and ops_in:
        us = model * (e.step_ms or 0.0) * 1e3 / ops_in
        step = (f"{ops_in:,} ops per step in the model averaging ~{us:,.0f} us of host time each (step {e.ops.step} "
                "counted): CUDA graphs (torch.compile(mode='reduce-overhead')) or torch.compile to fuse them, or larger "
                "batches")
    elif e.kernels_per_step:
        step = (f"{e.kernels_per_step:,.0f} kernels per step averaging {e.kernel_us:.1f} us (last capture): CUDA graphs "
                "(torch.compile(mode='reduce-overhead')) or torch.compile to fuse them, or larger batches")
    else:
        step = ("the host launches work slower than the GPU runs it: torch.compile (fuses kernels), CUDA graphs, or "
                "larger batches; c counts the kernels per step")
    return Verdict("host-bound", "host-bound: launches and Python in the model",
                   f"{gpu} · forward+backward+optimizer {share(model)} of the step on the host · {cpu}", step,
                   confidence, rules)


def _outside_model_verdict(c: _Context, rules: list[Rule], model: float, other: float,
                           confidence: Confidence) -> Verdict:
    """Host-bound with more of the step outside every phase than in the model: ops launched outside
    any module, or the loop thread's CPU tells Python work from a thread blocked on something tuimon
    does not see. Time the thread waited for a core counts with its CPU: on a busy machine it would
    have run then (the same bar for the sum). Until that CPU is read (None), the verdict names the
    time outside the model, not its kind."""
    e = c.e
    _, cpu = _loop_cpu(e)
    gpu = c.gpu_words()
    if e.loop_cpu is None:  # Python or a blocked thread: only its CPU can tell
        return Verdict("host-bound", "host-bound: outside the model",
                       f"{gpu} · other {share(other)} of the step (forward+backward+optimizer {share(model)}) · {cpu}",
                       f"{share(other)} of the step is outside the model, data and syncs; the loop thread's CPU, once "
                       "read, tells Python work from a thread blocked on something tuimon does not see",
                       "low", rules)
    wait = e.loop_cpu_wait if e.loop_cpu_wait is not None and e.loop_cpu_wait >= 0.5 else 0.0
    line = next((h for h in e.hot if h.phase == "other"), None)
    at = f" · {line.line} {share(line.share)} of the time ({how_of(line)[0]})" if line else ""
    ops_out = e.ops.by_phase.get("other", 0) if e.ops else 0
    at_ops = _time_at_op_lines(e, "other", other)
    if e.ops is not None and ops_out and c.busy is not None and (
            at_ops is not None or _native_share(e.hot, "other") >= 0.5
            or _ops_explain(ops_out, other * (e.step_ms or 0.0))):
        us = at_ops[1] if at_ops is not None else other * (e.step_ms or 0.0) * 1e3 / ops_out
        top = next(iter(e.ops.lines.items()), None)
        return Verdict("host-bound", "host-bound: launches outside the model",
                       f"{gpu} · other {share(other)} of the step: {ops_out:,} ops per step outside any module, "
                       f"~{us:,.0f} us each on the host"
                       + (f" ({share(at_ops[0])} of the step at the lines issuing them)" if at_ops else "")
                       + f" (step {e.ops.step} counted){at}",
                       f"tensor code outside the model issues {ops_out:,} small ops a step"
                       + (f", {top[1]:,} of them at {top[0]}" if top else "")
                       + ": fuse them (torch.compile that function), batch them into fewer, larger ops, or capture "
                         "them in a CUDA graph", confidence, rules)
    if e.loop_cpu + wait < T.LOOP_CPU_BUSY.value:
        where = (f"it is blocked at {line.line} ({share(line.waiting)} of that line's samples blocked in a call: a "
                 "sleep, a lock, I/O, a wait)" if line and line.waiting >= 0.5 else
                 "it is blocked on something tuimon does not see (I/O, locks, sleeps, collectives): h shows the "
                 "lines")
        return Verdict("host-bound", "host-bound: the loop waits elsewhere",
                       f"{gpu} · other {share(other)} of the step · {cpu} (< {T.LOOP_CPU_BUSY.show()}){at}",
                       f"outside the model, data and syncs the loop thread is mostly not computing: {where}",
                       confidence, rules)
    step = (f"{share(other)} of the step is Python outside the model, data and syncs"
            + (f", {share(line.share)} of it at {line.line}" if line else "")
            + ": move it off the loop (logging, metrics, host-side preprocessing), or do it every N steps")
    if line and line.native >= 0.5:
        step = (f"{share(other)} of the step is outside the model, {share(line.share)} of the time at {line.line}, "
                f"in a native call ({share(line.native)} of its samples: a copy or an op on the CPU): move that work "
                "to the GPU or to the DataLoader's workers, or do it every N steps")
    if e.loop_cpu < T.LOOP_CPU_BUSY.value:  # the wait for a core made it busy
        step += (f"; and the loop thread waited for a core {wait:.0f}% of the time: other processes compete for "
                 "this machine's CPUs (DataLoader workers beyond the cores, other jobs): leave the loop a core")
    return Verdict("host-bound", "host-bound: Python outside the model",
                   f"{gpu} · other {share(other)} of the step (forward+backward+optimizer {share(model)}) · {cpu}{at}",
                   step, confidence, rules)


def _cpu_verdict(c: _Context, rules: list[Rule]) -> Verdict:
    """The model computes on the CPU: more of its cores if the ops run on one, else a GPU or fewer,
    fused ops."""
    e = c.e
    model = sum(e.phases.get(p, 0.0) for p in MODEL)
    _, cpu = _loop_cpu(e)
    cores = f" of {e.cpus} cores" if e.cpus else ""
    process = f" · the process at {e.job_cpu:.0f}% CPU{cores}" if e.job_cpu is not None else ""
    data = f" · data wait {share(e.data_share)}" if e.data_share else ""
    evidence = f"forward+backward+optimizer {share(model)} of the step · {cpu}{process}{data} · no CUDA work"
    opt = e.phases.get("optimizer", 0.0)
    if opt and opt == max(e.phases.get(p, 0.0) for p in MODEL):  # the optimizer's step is the model's largest part
        return Verdict("cpu-bound", "CPU-bound: the optimizer step",
                       f"optimizer {share(opt)} of the step · {evidence}" + (f" · {e.optimizer}" if e.optimizer else ""),
                       _optimizer_step(e, opt), _margin(model, T.MODEL_MAJORITY), rules)
    alone = (e.job_cpu is not None and e.loop_cpu is not None
             and e.job_cpu - e.loop_cpu < T.INTRA_OP_IDLE.value and (e.cpus or 0) > 1)
    if alone:
        step = (f"the ops run on the loop thread alone (the process at {e.job_cpu:.0f}% CPU{cores}): more intra-op "
                "threads, torch.set_num_threads(N) (OMP_NUM_THREADS / MKL_NUM_THREADS may have set 1), up to the "
                "cores the DataLoader workers leave; beyond that a GPU (model.to('cuda')), or torch.compile to fuse "
                "the CPU ops")
    else:
        step = ("the model's arithmetic on the CPU is the limit: a GPU (model.to('cuda')) if there is one; else "
                "torch.compile (fused CPU kernels), bf16 autocast on CPUs with AMX / AVX-512 BF16, fewer FLOPs; "
                "torch.get_num_threads() against the cores the job has")
    return Verdict("cpu-bound", "CPU-bound: the model's compute", evidence, step,
                   _margin(model, T.MODEL_MAJORITY), rules)


def _copy_verdict(c: _Context, cp: CopyTimes, rules: list[Rule]) -> Verdict:
    """Host-to-device copies that hold the loop, and the fix that fits how they are made."""
    e = c.e
    pcie = f" · PCIe to the GPU {e.pcie_rx / 2**30:.1f} GiB/s" if e.pcie_rx is not None else ""
    evidence = (f"copies {share(cp.share)} of the step ({cp.ms:.1f} ms): {cp.h2d_mb:,.1f} MB to the GPU per step in "
                f"{cp.calls:,.0f} copies, {share(cp.pageable)} from pageable memory, {share(cp.blocking)} blocking"
                f"{pcie} · {c.gpu_words()}")
    if cp.pageable >= 0.5:
        step = ("the batch is copied from pageable memory, which blocks the loop for the whole transfer: "
                "DataLoader(pin_memory=True) (or tensor.pin_memory()) and .to(device, non_blocking=True), so the copy "
                "overlaps the GPU's work")
    elif cp.blocking >= 0.5:
        step = ("pinned, but copied without non_blocking=True: .to(device, non_blocking=True) lets the copy overlap the "
                "GPU's work")
    else:
        step = (f"{cp.h2d_mb:,.0f} MB a step, pinned and asynchronous, still hold the loop: copy less (uint8 images "
                "converted on the GPU, smaller dtypes), or move the preprocessing to the GPU")
    if cp.d2h_mb >= cp.h2d_mb and cp.d2h_mb:
        step += f"; {cp.d2h_mb:,.1f} MB come back to the host each step: keep them on the GPU"
    return Verdict("copy-bound", "copy-bound: host-to-device copies", evidence, step, _margin(cp.share, T.COPY_HIGH),
                   rules)


def _time_at_op_lines(e: Evidence, phase: str, phase_share: float) -> tuple[float, float] | None:
    """Measured launches: the sampled time at the phase's hot lines that issue ops (the op counter
    names the lines it counted at) whose own time comes to at most OP_HOST_MAX_US an op, when
    they are half or more of the phase: (their share of the step, the host us per op). None
    otherwise. (A launch holds the GIL for microseconds, so the sampler sees these lines as Python:
    their op count, not how the thread looked, says what the time is. A line slower than that per
    op does other work, and is left out rather than averaged in.)"""
    if e.ops is None or not e.step_ms or phase_share <= 0:
        return None
    step_us = e.step_ms * 1e3
    lines = [h for h in e.hot if h.phase == phase and e.ops.lines.get(h.line)
             and h.share * step_us / e.ops.lines[h.line] <= T.OP_HOST_MAX_US.value]
    at = sum(h.share for h in lines)
    ops = sum(e.ops.lines[h.line] for h in lines)
    if not ops or at < 0.5 * phase_share:
        return None
    return at, at * step_us / ops


def _ops_explain(ops: int, ms: float) -> bool:
    """At the least host time an op costs, do these ops take half or more of ms? (An op's launch
    holds the GIL for microseconds: a sampler that waits for the thread's next bytecode sees the
    line, not the native call; the count tells.)"""
    return ms > 0 and ops * T.OP_HOST_US.value / 1e3 >= 0.5 * ms


def _native_share(hot: list[HotLine], phase: str) -> float:
    """Of a phase's samples, the share the loop thread spent inside native calls (ops, copies)."""
    n = sum(h.samples for h in hot if h.phase == phase)
    return sum(h.samples * h.native for h in hot if h.phase == phase) / n if n else 0.0


def _optimizer_step(e: Evidence, opt: float) -> str:
    """What speeds up an optimizer step that dominates, from how it steps (the probe read its
    settings, and torch's own choice where it was left to torch)."""
    desc = e.optimizer or ""
    if "fused=True" in desc:
        return (f"optimizer.step() is {share(opt)} of the step though fused ({desc}): fewer, larger parameters, or "
                "CUDA graphs around the step (torch.compile)")
    if "foreach=False" in desc:
        return (f"optimizer.step() is {share(opt)} of the step and updates its parameters one by one ({desc}): "
                "foreach=True (one kernel per group of tensors), or fused=True on CUDA (Adam, AdamW, SGD)")
    return (f"optimizer.step() is {share(opt)} of the step ({desc or 'its settings unknown'}): fused=True on CUDA "
            "(Adam, AdamW, SGD), or torch.compile of the step")


def _exited_verdict(c: _Context, rules: list[Rule]) -> Verdict:
    end = c.e.job_end
    assert end is not None  # (the rule fired: the process ended)
    headline, evidence, step = exited_words(end, c.e.memory, c.e.ran_as)
    return Verdict("exited", headline, evidence, step, "high" if end.how != "unknown" else "medium", rules)


def _stalled_verdict(c: _Context, rules: list[Rule]) -> Verdict:
    headline, evidence, step = stalled_words(c.e, c.gpu_words())
    s = c.e.stall
    confidence: Confidence = "high" if s is not None and s.quiet_s >= 2 * s.limit_s else "medium"
    return Verdict("stalled", headline, evidence, step, confidence, rules)


# -- a process without the probe ------------------------------------------------------------------

ANATOMY = "the loop's anatomy (data, forward, backward, optimizer, syncs) needs `tuimon run`"


def rule_outside(c: _Context) -> Rule:
    """No channel (`attach` to a job started without the probe): the verdict comes from what can be
    seen from outside, the GPU's activity (NVML) and the main thread's lines (py-spy)."""
    e = c.e
    lines = Check("main thread samples (py-spy)", str(e.outside_samples), f">= {T.HOT_MIN_SAMPLES.show()}",
                  e.outside_samples >= T.HOT_MIN_SAMPLES.value if e.outside else None, T.HOT_MIN_SAMPLES.source)
    fired = not e.has_channel and e.outside
    return Rule("outside", "From outside (no probe: NVML and py-spy)", fired,
                [c.busy_check(), lines] if not e.has_channel else [],  # (with the probe: nothing to check)
                f"no channel: {c.gpu_words()}, main thread {_main_words(e) or 'not sampled yet'}; " + ANATOMY
                if fired else "the loop's own timings are read" if e.has_channel else "not sampled from outside")


def _main_words(e: Evidence) -> str:
    """'62% at train.py:41 in main (in a native call)', from the main thread's hottest line."""
    if not e.hot:
        return ""
    top = e.hot[0]
    word, of = how_of(top)
    return f"{share(top.share)} at {top.line} ({word}{'' if of >= 0.95 else f' {of:.0%}'})"


def _outside_verdict(c: _Context, rules: list[Rule]) -> Verdict:
    """From the GPU's activity and the main thread's top line: the GPU's unit when it is busy,
    where the host holds it back when it idles; never a wait for steps that will not come."""
    e = c.e
    fired = {r.code for r in rules if r.fired}
    main = _main_words(e)
    cpu = f" · main thread CPU {e.loop_cpu:.0f}%" if e.loop_cpu is not None else ""
    seen = f" · main thread {main}{cpu}" if main else (f" · hot lines: {e.outside_why}" if e.outside_why else cpu)
    gpu = f"{c.gpu_words()}{'' if c.busy is None else ' (NVML)'}"
    for code in ("memory-bound", "compute-bound", "healthy"):
        if code in fired:
            v = _verdict(code, c, rules)
            units = f" · DRAM {pct(e.dram_bw)} · {c.compute_name} {pct(c.compute)}" if not c.busy_note else ""
            confidence: Confidence = "low" if v.confidence == "low" else "medium"  # (no loop timings beside it)
            return Verdict(v.code, v.headline, f"{gpu}{units}{seen}", f"{v.next_step}; {ANATOMY}", confidence, rules)
    if c.busy is None and not main:
        return Verdict("waiting", "no loop timings", f"no channel, no GPU activity seen{seen}",
                       f"{ANATOMY}; GPU and process numbers need neither", "low", rules)
    if c.busy is not None and c.busy >= T.GPU_IDLE.value:
        return Verdict("mixed", "no single bottleneck (from outside)", f"{gpu}{seen}",
                       f"the GPU is busy part of the time; {ANATOMY}, and its captures (c)", "low", rules)
    headline = "host-bound: the GPU waits (from outside)" if c.busy is not None else "host-bound: no GPU seen (from outside)"
    confidence = "low" if c.busy is None or not main else _margin(c.busy, T.GPU_IDLE, above=False)
    return Verdict("host-bound", headline, f"{gpu}{seen}", _outside_step(e, c.busy is not None),
                   "medium" if confidence == "high" else confidence, rules)


def _outside_step(e: Evidence, gpu: bool) -> str:
    """What the main thread's top line says to do, from how the thread was there."""
    idle = " while the GPU idles" if gpu else ""
    if not e.hot:
        return f"the host's work is not seen yet ({e.outside_why or 'no lines'}); {ANATOMY}"
    top = e.hot[0]
    word, _ = how_of(top)
    at = f"{top.line} ({share(top.share)} of its time)"
    if word == "Python":
        return f"the main thread runs Python at {at}{idle}: move that work off the loop, or do it every N steps; {ANATOMY}"
    if word == "in a native call":
        return (f"the main thread is in a native call at {at}{idle} (a copy or an op on the CPU): move it to the GPU or "
                f"to the DataLoader's workers; {ANATOMY}")
    return (f"the main thread is blocked at {at}{idle}: the next batch, a lock, I/O, a sleep or a wait for the GPU; "
            f"{ANATOMY} to tell which")
