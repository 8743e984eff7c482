"""The running job against its baseline: is it measurably slower, by how much, and which phase
grew. Decided on distributions, not on one step: the recent steps' median must be REGRESSION_FACTOR
above the baseline's AND a one-sided Mann-Whitney U test must find the recent steps slower at
REGRESSION_P (thresholds.py says where both come from). Pure: numbers in, a Comparison out.

Steps of a training loop are not independent draws (a slow phase lasts several steps), so the
test's p-value is optimistic; the factor carries the decision and the test keeps a handful of
outliers or a too-small window from making it."""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Sequence

from ..model import Baseline, Comparison, PhaseDelta, TrainingSnapshot
from . import thresholds as T
from .summary import percentile


class Reference:
    """A baseline's step times made ready for comparing many windows against: sorted, with their
    tie counts (the U test below then costs a binary search per distinct window value)."""

    def __init__(self, values: Sequence[float]):
        self.sorted = sorted(v for v in values if v > 0 and math.isfinite(v))
        self.counts = Counter(self.sorted)
        self.ties = sum(t ** 3 - t for t in self.counts.values())
        self.p50 = percentile(self.sorted, 50) if self.sorted else None


def u_statistic(x: Sequence[float], ref: Reference) -> tuple[float, float]:
    """Mann-Whitney's U of x against the reference (pairs with x larger, ties counting half) and
    the pooled samples' tie term, sum(t^3 - t) over groups of equal values."""
    y, u, ties = ref.sorted, 0.0, ref.ties
    for v, k in Counter(x).items():
        lo, hi = bisect_left(y, v), bisect_right(y, v)
        u += k * (lo + 0.5 * (hi - lo))
        t = hi - lo + k
        ties += (t ** 3 - t) - ((hi - lo) ** 3 - (hi - lo))
    return u, ties


def u_test(x: Sequence[float], ref: Reference) -> tuple[float, float]:
    """One-sided p-values that x tends to be larger than the reference, and smaller: Mann-Whitney
    U with the normal approximation, tie and continuity corrections (as scipy.stats.mannwhitneyu
    with method='asymptotic', alternative 'greater' and 'less')."""
    n1, n2 = len(x), len(ref.sorted)
    if not n1 or not n2:
        return 1.0, 1.0
    u, ties = u_statistic(x, ref)
    n = n1 + n2
    var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:  # every value equal: no evidence either way
        return 1.0, 1.0
    mu, sd = n1 * n2 / 2, math.sqrt(var)
    greater = 0.5 * math.erfc((u - mu - 0.5) / sd / math.sqrt(2))
    less = 0.5 * math.erfc(-(u - mu + 0.5) / sd / math.sqrt(2))
    return greater, less


def mann_whitney_greater(x: Sequence[float], y: Sequence[float]) -> float:
    """One-sided p-value that x tends to be larger than y."""
    return u_test(x, Reference(y))[0]


def past_warmup(t: TrainingSnapshot) -> list[float]:
    """The snapshot's recent step times, less the job's first REGRESSION_WARMUP_STEPS steps
    (recent_step_ms holds the last steps, the newest being step t.steps)."""
    keep = max(0, t.steps - int(T.REGRESSION_WARMUP_STEPS.value))
    return t.recent_step_ms[-keep:] if keep else []


def recent_window(step_ms: Sequence[float]) -> list[float]:
    """The newest steps spanning REGRESSION_WINDOW_S, and never fewer than REGRESSION_MIN_STEPS
    (where there are that many): long steps still give a distribution, short ones a recent one."""
    out: list[float] = []
    span = 0.0
    for v in reversed(step_ms):
        if span >= T.REGRESSION_WINDOW_S.value * 1e3 and len(out) >= T.REGRESSION_MIN_STEPS.value:
            break
        out.append(v)
        span += v
    out.reverse()
    return out


def compare(baseline: Baseline, file: str, t: TrainingSnapshot | None, gpu_models: Sequence[str] = (),
            ref: Reference | None = None) -> Comparison:
    """ref: Reference(baseline.step_ms), made once by a caller that compares every cycle."""
    ref = ref or Reference(baseline.step_ms)
    window = recent_window(past_warmup(t)) if t is not None else []
    notes = _notes(baseline, t, gpu_models)
    base_p50 = round(ref.p50, 3) if ref.p50 is not None else None
    if len(window) < T.REGRESSION_MIN_STEPS.value or len(ref.sorted) < T.REGRESSION_MIN_STEPS.value:
        return Comparison(file, "too few steps", len(window), len(ref.sorted), baseline_p50_ms=base_p50, notes=notes)
    p50 = percentile(sorted(window), 50)
    ratio = p50 / ref.p50
    slower, faster = u_test(window, ref)
    if ratio >= T.REGRESSION_FACTOR.value and slower < T.REGRESSION_P.value:
        state, p = "regression", slower
    elif ratio <= 1 / T.REGRESSION_FACTOR.value and faster < T.REGRESSION_P.value:
        state, p = "faster", faster
    else:
        state, p = "same", slower
    phases = _phase_deltas(baseline, t)
    grown = max(phases, key=lambda d: d.delta_ms) if phases and state == "regression" else None
    gpu_ms = t.gpu.step_ms if t.gpu is not None else None
    gpu_grown = None
    if state == "regression" and gpu_ms is not None and baseline.gpu_step_ms is not None:
        # The host phases say where the loop waited; a kernel that got slower shows as a longer
        # sync (or whichever phase waits on the GPU). CUDA events see the GPU's own time grow.
        if gpu_ms - baseline.gpu_step_ms >= 0.5 * (p50 - ref.p50):
            gpu_grown = PhaseDelta("GPU step", round(baseline.gpu_step_ms, 3), round(gpu_ms, 3))
    return Comparison(
        file, state, len(window), len(ref.sorted), round(p50, 3), base_p50, round(ratio, 4), p,
        grown if grown is not None and grown.delta_ms > 0 else None, gpu_grown, phases,
        t.steps_per_s, baseline.steps_per_s, t.data_wait_share, baseline.data_wait_share,
        gpu_ms, baseline.gpu_step_ms, notes)


def _phase_deltas(baseline: Baseline, t: TrainingSnapshot) -> list[PhaseDelta]:
    """Each phase's time per step, then and now. Without phases on both sides, the data wait
    (which every probe measures) is the one phase there is to compare."""
    now = {p.name: p.mean_ms for p in t.phases}
    then = {p.name: p.mean_ms for p in baseline.phases}
    if not (now and then):
        now, then = {}, {}
        if t.data_wait_share is not None and t.step_time_ms is not None:
            now["data"] = t.data_wait_share * t.step_time_ms.mean
        if baseline.data_wait_share is not None and baseline.step_time_ms is not None:
            then["data"] = baseline.data_wait_share * baseline.step_time_ms.mean
    return [PhaseDelta(name, round(then.get(name, 0.0), 3), round(now.get(name, 0.0), 3))
            for name in list(then) + [n for n in now if n not in then]]


def _program(argv: Sequence[str]) -> str:
    """What a command runs, without its options: the -m module, else the first script, else the
    executable (runs of one script with other arguments are the same program)."""
    args = list(argv)
    if "-m" in args[:-1]:
        return args[args.index("-m") + 1]
    return next((a for a in args if a.endswith(".py")), args[0] if args else "")


def _notes(baseline: Baseline, t: TrainingSnapshot | None, gpu_models: Sequence[str]) -> list[str]:
    notes = []
    if gpu_models and baseline.gpu_models and sorted(set(gpu_models)) != sorted(set(baseline.gpu_models)):
        notes.append(f"baseline on {', '.join(sorted(set(baseline.gpu_models)))}; this job on "
                     f"{', '.join(sorted(set(gpu_models)))}")
    if t is not None and t.argv and baseline.command and _program(t.argv) != _program(baseline.command):
        notes.append(f"baseline of another program: {_program(baseline.command)}")
    if t is not None and (baseline.world_size or 1) != (t.world_size or 1):
        notes.append(f"baseline: {_ranks(baseline.world_size)}; this job: {_ranks(t.world_size)}")
    return notes


def _ranks(world_size: int | None) -> str:
    """No WORLD_SIZE: one process."""
    return f"{world_size} ranks" if (world_size or 1) > 1 else "1 process"
