"""The verdict: which bottleneck the window of steps shows, the numbers that decided it, how sure
it is, and one next step from those numbers. Pure: Evidence in, Verdict out.

One module per bottleneck class holds its rule (its checks: value, threshold, where the threshold
comes from: thresholds.py, so a screen can show why every rule fired or did not) and its words
side by side. VERDICTS, below, is the order they are tried in; the first rule that fires decides:

  exited           the process has ended: how and why, as far as tuimon can know
  stalled          no step far beyond the loop's own history (analysis/stall.py): where it waits
  waiting          not enough data
  memory-growth    the live tensors rise along a line that reaches the cap within 10 minutes: the
                   job is about to die of out-of-memory, which outranks how fast it runs
  outside          (no probe, `attach`) the GPU's activity (NVML) and the main thread's hot lines
                   (py-spy): the GPU's unit, or where the host holds it back
  straggler        (2+ ranks) one rank's own work is >= 1.43x the others': they wait for it
  memory-pressure  the allocator frees its cache and retries in >= 1 step in 20: it hides behind
                   every other class
  input-high       the loop waits >= 20% of the step for data: fix that first, it hides the rest
  copy-bound       >= 20% of the step in host-to-device copies
  comm-bound       >= 10% of the step waits in collectives (the reduction is not hidden)
  memory-bound, compute-bound, healthy
                   the GPU busy (SM >= 80%), by which unit leads (gpu_unit.py)
  cpu-bound        no CUDA work in the job, the model's compute most of the step, the loop thread
                   near a full core
  data-parallel    torch.nn.DataParallel on 2+ GPUs, its replicate, scatter and gather >= 10% of the
                   step or the GPUs not known busy (SM < 50%, or not measured, as host-bound reads
                   them): DistributedDataParallel, PyTorch's advice;
                   before host-bound, whose launches and Python are, under it, the replicas'
  input-moderate   >= 5%, unless a part of the step 4x larger outranks it
  sync-bound       device-to-host syncs >= 20%, or >= 5% with the GPU mostly idle, not outranked
  host-bound       the GPU mostly idle (SM < 50%) and the loop waits neither for data nor for the
                   GPU (or those waits are outranked): launches, Python, or a blocked loop thread
  (none fired)     mixed: no single bottleneck (mixed.py)

Moderate shares rank by size: a moderate data wait or sync share yields to a part of the step
RANK_FACTOR (4x) larger, so the verdict names what holds the most of the step.

Adding a bottleneck class: one file plus one row (docs/DESIGN.md, "Verdicts", shows one): a module
with rule(c) -> Rule, verdict(c, rules) -> Verdict and CLASS = VerdictClass(rule=rule,
verdict=verdict), and its row `"name": name.CLASS` in VERDICTS where it belongs in precedence. mypy
then asks for the name in model/vocab.py (RuleCode, and VerdictCode for a new kind of verdict), and
tests/test_vocab.py holds RULE_CODES to the table's order.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ...model.vocab import RuleCode
from . import (
    comm,
    copy,
    cpu,
    data_parallel,
    exited,
    gpu_unit,
    host,
    input,
    memory,
    memory_growth,
    mixed,
    outside,
    stalled,
    straggler,
    sync,
    waiting,
)
from .base import Check, Context, Rule, Verdict, VerdictClass
from .evidence import (
    CommEvidence,
    Evidence,
    GpuEvidence,
    HostEvidence,
    OutsideEvidence,
    PresentEvidence,
    RanksEvidence,
    StalledRank,
    SyncEvidence,
    WaitingRank,
    WindowEvidence,
    WorkersEvidence,
    WorkerState,
)

VERDICTS: Mapping[RuleCode, VerdictClass] = MappingProxyType({
    "exited": exited.CLASS,
    "stalled": stalled.CLASS,
    "waiting": waiting.CLASS,
    # A job that will die of out-of-memory within the horizon loses its work whatever its speed: before
    # every bottleneck class. After exited (its OOM death is said there, with this as what it ran as),
    # stalled (a hang says why no memory moves) and waiting (too few steps to trust the job's numbers).
    "memory-growth": memory_growth.CLASS,
    "outside": outside.CLASS,
    "straggler": straggler.CLASS,
    "memory-pressure": memory.CLASS,
    "input-high": input.HIGH,
    "copy-bound": copy.CLASS,
    "comm-bound": comm.CLASS,
    "memory-bound": gpu_unit.MEMORY,
    "compute-bound": gpu_unit.COMPUTE,
    "healthy": gpu_unit.HEALTHY,
    "cpu-bound": cpu.CLASS,
    # DataParallel's cost is the host's: after the GPU's own classes (a busy GPU hides it), before the
    # host's moderate waits and host-bound (whose launches and Python are, under DataParallel, its replicas')
    "data-parallel": data_parallel.CLASS,
    "input-moderate": input.MODERATE,
    "sync-bound": sync.CLASS,
    "host-bound": host.CLASS,
})


def diagnose(e: Evidence) -> Verdict:
    """Every rule, in the table's order (the verdict shows them all); the first that fired speaks."""
    c = Context(e)
    rules = [row.rule(c) for row in VERDICTS.values()]
    for row, rule in zip(VERDICTS.values(), rules, strict=True):
        if rule.fired:
            return row.verdict(c, rules)
    return mixed.verdict(c, rules)


__all__ = [
    "VERDICTS", "Check", "CommEvidence", "Context", "Evidence", "GpuEvidence", "HostEvidence", "OutsideEvidence",
    "PresentEvidence", "RanksEvidence", "Rule", "StalledRank", "SyncEvidence", "Verdict", "VerdictClass",
    "WaitingRank", "WindowEvidence", "WorkerState", "WorkersEvidence", "diagnose",
]
