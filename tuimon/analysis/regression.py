"""The running job against its baseline: is it measurably slower, by how much, what grew, and did
its peak memory grow. Pure: numbers in, a Comparison out.

The statistic is the mean step time (1 / steps per second), what the job pays: a median hides a
slowdown that lives in the slow tail, and in input-bound jobs (bursty DataLoader workers) that tail
is where the time goes. Steps are not independent draws (a slow phase lasts several steps), so
they are compared as batch means (batches.py): the window's newest REGRESSION_BATCHES batches
against all of the baseline's, with Welch's t-test, which allows their variances and counts to
differ (method: batch means, Schmeiser 1982; a t-test on means of many iterations, as pyperf's
compare_to). A regression needs the window's mean to be REGRESSION_FACTOR above the baseline's
AND the test to find it slower at REGRESSION_P: one slow batch (a checkpoint, an epoch's workers
starting) widens the spread and decides nothing; the factor keeps a small steady drift from
alerting. The median and the p95 of the step times are kept beside it as evidence.

A peak allocated (the CUDA caching allocator's) PEAK_MEMORY_FACTOR above the baseline's is a
regression of its own; CPU jobs have none, and then there is no memory comparison."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..model import Baseline, Comparison, JobEnd, PeakMemory, PhaseDelta, TrainingSnapshot
from ..model.vocab import ComparisonState
from . import thresholds as T
from .batches import StepBatches, batched
from .summary import percentile

if TYPE_CHECKING:
    from .verdicts import Verdict


class Reference:
    """A baseline made ready for comparing many windows against: its batch means and their spread,
    its mean step time, its step times sorted (for the median and p95 beside the mean)."""

    def __init__(self, baseline: Baseline):
        b = baseline
        if b.batch_steps and len(b.batch_steps) == len(b.batch_ms):
            pairs = [(n, ms) for n, ms in zip(b.batch_steps, b.batch_ms, strict=True)
                     if n > 0 and ms > 0 and math.isfinite(ms)]
        else:  # (a baseline of layout 1 kept its step times only)
            pairs = [(x.steps, x.ms) for x in batched([v for v in b.step_ms if v > 0 and math.isfinite(v)])]
        self.batches = len(pairs)
        self.means = [ms / n for n, ms in pairs]
        self.means_mean, self.means_var = mean_var(self.means) if len(self.means) > 1 else (0.0, 0.0)
        steps, ms = sum(n for n, _ in pairs), sum(ms for _, ms in pairs)
        self.mean_ms = ms / steps if steps else None
        self.sorted = sorted(v for v in b.step_ms if v > 0 and math.isfinite(v))
        self.p50 = percentile(self.sorted, 50) if self.sorted else None
        self.p95 = percentile(self.sorted, 95) if self.sorted else None


def mean_var(x: Sequence[float]) -> tuple[float, float]:
    n = len(x)
    m = sum(x) / n
    return m, (sum((v - m) ** 2 for v in x) / (n - 1) if n > 1 else 0.0)


def welch(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """One-sided p-values that x's mean is larger than y's, and smaller: Welch's t-test with the
    Welch-Satterthwaite degrees of freedom (as scipy.stats.ttest_ind with equal_var=False)."""
    if len(x) < 2 or len(y) < 2:
        return 1.0, 1.0
    return welch_from(*mean_var(x), len(x), *mean_var(y), len(y))


def welch_from(mx: float, vx: float, nx: int, my: float, vy: float, ny: int) -> tuple[float, float]:
    """welch() from each side's mean, variance and count."""
    ax, ay = vx / nx, vy / ny
    se2 = ax + ay
    if se2 <= 0:  # no spread on either side: the means say it all
        return (0.0, 1.0) if mx > my else (1.0, 0.0) if mx < my else (1.0, 1.0)
    t = (mx - my) / math.sqrt(se2)
    df = se2 ** 2 / (ax ** 2 / (nx - 1) + ay ** 2 / (ny - 1))
    return student_t_sf(t, df), student_t_sf(-t, df)


def student_t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with df degrees of freedom (df > 0, not necessarily whole)."""
    tail = 0.5 * betainc(df / 2, 0.5, df / (df + t * t))
    return tail if t > 0 else 1.0 - tail


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (modified
    Lentz; Numerical Recipes, 3rd ed., 6.4)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1) / (a + b + 2):  # converges fast on this side only: use the symmetry
        return 1.0 - front * _beta_fraction(b, a, 1 - x) / b
    return front * _beta_fraction(a, b, x) / a


def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h


def progress(batches: StepBatches | None, needed: int) -> tuple[str, float, float]:
    """Where the window stands while too little is collected: words, and the seconds collected
    and needed (past the warm-up; a step longer than a batch makes a batch of its own)."""
    if batches is None or batches.steps is None or not batches.steps:
        return "collecting: no steps yet", 0.0, 0.0
    if batches.in_warmup:
        up = batches.end_s or 0.0
        steps = f"{batches.steps} of {T.REGRESSION_WARMUP_STEPS.value:g} steps, " \
            if batches.steps < T.REGRESSION_WARMUP_STEPS.value else ""
        return (f"collecting: warm-up ({steps}{min(up, T.REGRESSION_WARMUP_S.value):.0f} s of "
                f"{T.REGRESSION_WARMUP_S.value:g})", 0.0, 0.0)
    mean_s = batches.counted_ms / batches.counted / 1e3
    batch_s = max(T.REGRESSION_BATCH_S.value, mean_s)
    done = len(batches.batches)
    have = min(sum(b.ms for b in batches.batches) / 1e3 + batches.open.ms / 1e3, needed * batch_s)
    words = f"collecting: {have:.0f} s of {needed * batch_s:.0f}"
    if mean_s >= T.REGRESSION_BATCH_S.value:  # a batch is a step: say the steps too
        words += f" ({done} of {needed} steps)"
    return words, round(have, 1), round(needed * batch_s, 1)


def compare(baseline: Baseline, file: str, t: TrainingSnapshot | None, batches: StepBatches | None,
            gpu_models: Sequence[str] = (), ref: Reference | None = None) -> Comparison:
    """batches: the job's steps as the monitor saw them (fed every cycle); ref: Reference(baseline),
    made once by a caller that compares every cycle."""
    ref = ref or Reference(baseline)
    notes = _notes(baseline, t, gpu_models)
    need = int(T.REGRESSION_BATCHES.value)
    window = batches.window(need) if batches is not None else []
    base_mean = _round(ref.mean_ms, 3)
    memory = _peak_memory(baseline, t)
    if len(window) < need or ref.mean_ms is None or ref.batches < need:
        words, have, needed = progress(batches, need)
        return Comparison(file=file, state="collecting", progress=words, collected_s=have, needed_s=needed,
                          window_steps=sum(b.steps for b in window), baseline_steps=baseline.steps,
                          baseline_mean_ms=base_mean, baseline_p50_ms=_round(ref.p50, 3),
                          baseline_p95_ms=_round(ref.p95, 3), peak_memory=memory, notes=notes)
    mean = sum(b.ms for b in window) / sum(b.steps for b in window)
    ratio = mean / ref.mean_ms
    slower, faster = welch_from(*mean_var([b.mean_ms for b in window]), len(window), ref.means_mean, ref.means_var,
                                ref.batches)
    state: ComparisonState
    if ratio >= T.REGRESSION_FACTOR.value and slower < T.REGRESSION_P.value:
        state, p = "regression", slower
    elif ratio <= 1 / T.REGRESSION_FACTOR.value and faster < T.REGRESSION_P.value:
        state, p = "faster", faster
    else:
        state, p = "same", slower
    samples = sorted(v for b in window for v in b.samples)
    phases = _phase_deltas(baseline, t) if t is not None else []
    grown = max(phases, key=lambda d: d.delta_ms) if phases and state == "regression" else None
    gpu_ms = _gpu_mean(t)
    gpu_grown = None
    if state == "regression" and gpu_ms is not None and baseline.gpu_step_ms is not None:
        # The host phases say where the loop waited; a kernel that got slower shows as a longer
        # sync (or whichever phase waits on the GPU). CUDA events see the GPU's own time grow.
        if gpu_ms - baseline.gpu_step_ms >= 0.5 * (mean - ref.mean_ms):
            gpu_grown = PhaseDelta("GPU step", round(baseline.gpu_step_ms, 3), round(gpu_ms, 3))
    span_s = sum(b.ms for b in window) / 1e3
    steps_per_s = 1e3 / mean
    return Comparison(
        file=file, state=state, window_steps=sum(b.steps for b in window), baseline_steps=baseline.steps,
        window_s=round(span_s, 1), batches=len(window), baseline_batches=ref.batches,
        mean_ms=round(mean, 3), baseline_mean_ms=base_mean, ratio=round(ratio, 4), p_value=p,
        p50_ms=_round(percentile(samples, 50), 3) if samples else None, baseline_p50_ms=_round(ref.p50, 3),
        p95_ms=_round(percentile(samples, 95), 3) if samples else None, baseline_p95_ms=_round(ref.p95, 3),
        grown=grown if grown is not None and grown.delta_ms > 0 else None, gpu_grown=gpu_grown, phases=phases,
        steps_per_s=round(steps_per_s, 3), baseline_steps_per_s=_round(1e3 / ref.mean_ms, 3),
        throughput_per_s=_per_s(t, steps_per_s), baseline_throughput_per_s=dict(baseline.throughput_per_s),
        data_wait_share=t.data_wait_share if t is not None else None,
        baseline_data_wait_share=baseline.data_wait_share, gpu_step_ms=gpu_ms,
        baseline_gpu_step_ms=baseline.gpu_step_ms, peak_memory=memory, notes=notes)


def no_progress(c: Comparison, verdict: Verdict, end: JobEnd | None) -> Comparison:
    """A job that makes no progress fails against any baseline, whatever its finished steps say:
    one the verdict calls stalled (no step far past its own bar, a stopped process, ranks stalled:
    verdicts/stalled.py), or one that ended other than cleanly (an exception, an exit code, a
    signal, an end tuimon cannot tell from a crash). Its step time is unbounded; the window of
    finished steps would otherwise keep 'collecting' (a hang from the start) or say the last
    steps' verdict ('same') for as long as it hangs."""
    if verdict.code == "stalled":
        return replace(c, halted=f"{verdict.headline}: {verdict.evidence}")
    if end is not None and end.how != "clean":
        return replace(c, halted=f"{verdict.headline}: {end.headline}" if verdict.code == "exited" else end.headline)
    return c


def _round(v: float | None, digits: int) -> float | None:
    return None if v is None else round(v, digits)


def _gpu_mean(t: TrainingSnapshot | None) -> float | None:
    if t is None or t.gpu is None:
        return None
    return t.gpu.step_mean_ms if t.gpu.step_mean_ms is not None else t.gpu.step_ms


def _per_s(t: TrainingSnapshot | None, steps_per_s: float) -> dict[str, float]:
    """The job's counters per second over the window: its counts per step (the snapshot's) times
    the window's steps per second."""
    if t is None or not t.steps_per_s:
        return {}
    return {k: round(v / t.steps_per_s * steps_per_s, 3) for k, v in t.throughput_per_s.items()}


def _peak_memory(baseline: Baseline, t: TrainingSnapshot | None) -> PeakMemory | None:
    now = t.memory.peak_allocated if t is not None and t.memory is not None else None
    then = baseline.peak_allocated
    if not now or not then:
        return None
    ratio = now / then
    return PeakMemory(baseline_bytes=then, now_bytes=now, ratio=round(ratio, 4),
                      grew=ratio >= T.PEAK_MEMORY_FACTOR.value)


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

