"""Baselines: built from the same cycles the monitor draws (live, or a recording's), saved as JSON,
and read back with every byte checked (a baseline is a file anyone can hand us).

File: {"format": "tuimon-baseline", <a Baseline as JSON (tuimon/model/baseline.py)>}"""

from __future__ import annotations

import json
import time
from collections import deque

from ..analysis import thresholds as T
from ..analysis.batches import StepBatches
from ..analysis.regression import Reference
from ..analysis.summary import percentile
from ..channel.text import safe_text
from ..model import (
    BASELINE_VERSION,
    BadValue,
    Baseline,
    Cycle,
    PhaseRow,
    StepTimes,
    TrainingSnapshot,
    from_json,
    num,
    to_json,
)

FORMAT = "tuimon-baseline"
MAX_SAMPLES = 5000  # step times kept (the newest): their median and p95 are compared beside the mean
MAX_BATCHES = 5000  # batches kept (the newest): ~1.4 h of fast steps
ACTIVITY_FIELDS = ("sm_active", "tensor_active", "dram_bw", "util_gpu")


class BaselineError(Exception):
    """Why a baseline cannot be made, read or written, in words for the user."""


class BaselineBuilder:
    """Folds cycles into a Baseline. The step time is counted exactly (batches.py: every step past
    the job's warm-up, its time end to end); per-window numbers (phases, data wait, counters, the
    GPU's step time) are averaged weighted by the steps each cycle added, so a long run counts
    every part of itself."""

    def __init__(self, source: str):
        self.source = source
        self.step_ms: deque[float] = deque(maxlen=MAX_SAMPLES)
        self.batches = StepBatches(MAX_BATCHES)
        self._weighted: dict[str, list[float]] = {}  # key -> [sum of value * steps, steps]
        self._peak: int | None = None
        self._activity: dict[str, list[float]] = {f: [] for f in ACTIVITY_FIELDS}
        self._gpu_models: set[str] = set()
        self._training: TrainingSnapshot | None = None

    @property
    def steps(self) -> int:
        """Steps measured past the job's warm-up (the open batch's too)."""
        return self.batches.counted

    def _add(self, key: str, value: float | None, weight: int) -> None:
        if value is None:
            return
        acc = self._weighted.setdefault(key, [0.0, 0])
        acc[0] += value * weight
        acc[1] += weight

    def _mean(self, key: str) -> float | None:
        acc = self._weighted.get(key)
        return acc[0] / acc[1] if acc and acc[1] else None

    def add(self, c: Cycle) -> None:
        t = c.training
        if t is not None:
            before = self.batches.counted
            self.batches.add(t)
            n = self.batches.counted - before  # (steps past the warm-up this cycle)
            if n > 0:
                self.step_ms.extend(self.batches.added)
                self._training = t
                self._add("data_wait_share", t.data_wait_share, n)
                for ph in t.phases:
                    self._add("phase:" + ph.name, ph.mean_ms, n)
                    self._add("share:" + ph.name, ph.share, n)
                for name, per_s in t.throughput_per_s.items():
                    if t.steps_per_s:  # (per step, then per second of the run's own steps)
                        self._add("count:" + name, per_s / t.steps_per_s, n)
                if t.gpu is not None:
                    gpu = t.gpu.step_mean_ms if t.gpu.step_mean_ms is not None else t.gpu.step_ms
                    self._add("gpu_step_ms", gpu, n)
            if t.memory is not None and t.memory.peak_allocated:  # (the allocator's peak so far: warm-up too)
                self._peak = max(self._peak or 0, t.memory.peak_allocated)
            if self._training is None:
                self._training = t
        gpus = c.gpus or []
        used = [g for g in gpus if g.uses_target] or ([] if t is not None else gpus)
        for g in used:
            if isinstance(g.name, str):
                self._gpu_models.add(g.name)
            for f in ACTIVITY_FIELDS:
                v = num(getattr(g, f))
                if v is not None:
                    self._activity[f].append(v)

    def build(self) -> Baseline:
        batches = list(self.batches.batches)
        need = int(T.REGRESSION_BATCHES.value)
        if len(batches) < need:
            seen = sum(b.ms for b in batches) / 1e3 + self.batches.open.ms / 1e3
            raise BaselineError(f"only {seen:.1f} s of steps ({self.steps:,} step{'s' if self.steps != 1 else ''}) seen "
                                f"past the job's warm-up (its first {T.REGRESSION_WARMUP_S.value:g} s and "
                                f"{T.REGRESSION_WARMUP_STEPS.value:g} steps): a baseline needs {need} batches of "
                                f"{T.REGRESSION_BATCH_S.value:g} s of steps or one step each (a job with steps: "
                                "optimizer.step() or tuimon.step(); or measure longer)")
        samples = list(self.step_ms)
        s = sorted(samples)
        t = self._training
        steps, ms = sum(b.steps for b in batches), sum(b.ms for b in batches)
        mean = ms / steps
        phase_names = [k[6:] for k in self._weighted if k.startswith("phase:")]
        phases = [PhaseRow(p, round(self._mean("share:" + p) or 0.0, 4), round(self._mean("phase:" + p) or 0.0, 3))
                  for p in phase_names]
        return Baseline(
            version=BASELINE_VERSION,
            created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            source=self.source,
            step_ms=[round(v, 3) for v in samples],
            command=list(t.argv) if t is not None else [],
            gpu_models=sorted(self._gpu_models),
            rank=t.rank if t is not None else None,
            world_size=t.world_size if t is not None else None,
            steps=steps,
            step_time_ms=StepTimes(p50=round(percentile(s, 50), 3), p95=round(percentile(s, 95), 3),
                                   p99=round(percentile(s, 99), 3), mean=round(mean, 3),
                                   last=round(samples[-1], 3)),
            steps_per_s=round(1e3 / mean, 3),
            throughput_per_s={k[6:]: round(per_step * 1e3 / mean, 3) for k in self._weighted
                              if k.startswith("count:") and (per_step := self._mean(k)) is not None},
            data_wait_share=_round(self._mean("data_wait_share"), 4),
            phases=phases,
            gpu_step_ms=_round(self._mean("gpu_step_ms"), 3),
            gpu_activity={f: round(sum(v) / len(v), 1) for f, v in self._activity.items() if v},
            batch_steps=[b.steps for b in batches],
            batch_ms=[b.ms for b in batches],
            peak_allocated=self._peak,
        )


def _round(v: float | None, digits: int) -> float | None:
    return None if v is None else round(v, digits)


def dumps(baseline: Baseline) -> str:
    """The file's text: one line of JSON."""
    return json.dumps({"format": FORMAT, **to_json(baseline)}, separators=(",", ":")) + "\n"


def load(path: str) -> Baseline:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(64 << 20)
    except OSError as e:
        raise BaselineError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise BaselineError(f"{path} is not a tuimon baseline (not text)") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise BaselineError(f"{path} is not a tuimon baseline (not JSON: {e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BaselineError(f"{path} is not a tuimon baseline (make one with `tuimon baseline save`)")
    version = doc.get("version")
    if not isinstance(version, int) or version > BASELINE_VERSION:
        raise BaselineError(f"{path} is a baseline of layout {version!r}: this tuimon reads layout "
                            f"{BASELINE_VERSION} (a newer tuimon wrote it)")
    try:
        b = from_json(Baseline, doc)
    except BadValue as e:
        raise BaselineError(f"{path} is a damaged baseline: {e}") from None
    if len(b.batch_steps) != len(b.batch_ms):
        raise BaselineError(f"{path} is a damaged baseline: {len(b.batch_steps)} batch step counts for "
                            f"{len(b.batch_ms)} batch times")
    usable = Reference(b).batches
    if usable < T.REGRESSION_BATCHES.value:
        raise BaselineError(f"{path} holds {usable} usable batches of steps: too few to compare against "
                            f"(at least {T.REGRESSION_BATCHES.value:g})")
    return b


def describe(b: Baseline) -> str:
    """A few lines saying what a baseline holds (`tuimon baseline show`, `baseline save`)."""
    st = b.step_time_ms
    lines = [f"baseline of {safe_text(' '.join(b.command), 200) or '(command unknown)'}",
             f"  measured {safe_text(b.created, 40)} from {safe_text(b.source, 200)}; {b.steps:,} steps "
             f"past the warm-up, in {len(b.batch_steps) or len(b.step_ms):,} {'batches' if b.batch_steps else 'kept'}"]
    if b.gpu_models:
        lines.append(f"  GPU: {safe_text(', '.join(b.gpu_models), 200)}")
    if st is not None:
        gpu = f"; GPU {b.gpu_step_ms:.2f} ms/step (CUDA events)" if b.gpu_step_ms is not None else ""
        lines.append(f"  step time mean {st.mean:.2f} ms{gpu}; p50 {st.p50:.2f}, p95 {st.p95:.2f}, p99 {st.p99:.2f}")
    rates = []
    if b.steps_per_s is not None:
        rates.append(f"{b.steps_per_s:.2f} steps/s")
    rates += [f"{v:,.0f} {safe_text(k, 24)}/s" for k, v in b.throughput_per_s.items()]
    if b.data_wait_share is not None:
        rates.append(f"data wait {b.data_wait_share:.0%}")
    if rates:
        lines.append("  " + ", ".join(rates))
    if b.phases:
        lines.append("  phases: " + ", ".join(f"{safe_text(p.name, 24)} {p.mean_ms:.2f} ms ({p.share:.0%})" for p in b.phases))
    lines.append(f"  peak memory {b.peak_allocated / 2**30:.2f} GiB (the caching allocator's peak allocated)"
                 if b.peak_allocated else "  no peak memory (no CUDA allocator numbers: a CPU job)")
    if b.gpu_activity:
        lines.append("  GPU activity: " + ", ".join(f"{safe_text(k, 24)} {v:.0f}%" for k, v in b.gpu_activity.items()))
    return "\n".join(lines)

