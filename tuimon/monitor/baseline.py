"""Baselines: built from the same cycles the monitor draws (live, or a recording's), saved as JSON,
and read back with every byte checked (a baseline is a file anyone can hand us).

File: {"format": "tuimon-baseline", <a Baseline as JSON (tuimon/model/baseline.py)>}"""

from __future__ import annotations

import json
import os
import time
from collections import deque

from ..analysis import thresholds as T
from ..analysis.summary import percentile
from ..channel.text import safe_text
from ..model import BASELINE_VERSION, BadValue, Baseline, Cycle, PhaseRow, StepTimes, from_json, num, to_json
from .state import new_step_times

FORMAT = "tuimon-baseline"
MAX_SAMPLES = 5000  # step times kept: the distribution compared against (the newest ones)
ACTIVITY_FIELDS = ("sm_active", "tensor_active", "dram_bw", "util_gpu")


class BaselineError(Exception):
    """Why a baseline cannot be made, read or written, in words for the user."""


class BaselineBuilder:
    """Folds cycles into a Baseline. Per-window numbers (phases, data wait, throughput) are
    averaged weighted by the steps each cycle added, so a long run counts every part of itself."""

    def __init__(self, source: str):
        self.source = source
        self.step_ms: deque[float] = deque(maxlen=MAX_SAMPLES)
        self.steps = 0
        self._last_steps = 0
        self._weighted: dict[str, list[float]] = {}  # key -> [sum of value * steps, steps]
        self._gpu_step_ms: list[float] = []
        self._activity: dict[str, list[float]] = {f: [] for f in ACTIVITY_FIELDS}
        self._gpu_models: set[str] = set()
        self._training = None

    def _add(self, key: str, value, weight: int) -> None:
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
            added, self._last_steps = new_step_times(self._last_steps, t), t.steps
            warmup = int(T.REGRESSION_WARMUP_STEPS.value) - (t.steps - len(added))  # of these, the job's first steps
            if warmup > 0:
                added = added[warmup:]  # (left out of windows too: see regression.past_warmup)
            self.step_ms.extend(added)
            self.steps += len(added)
            self._training = t
            n = len(added)
            if n:
                self._add("steps_per_s", t.steps_per_s, n)
                self._add("data_wait_share", t.data_wait_share, n)
                for ph in t.phases:
                    self._add("phase:" + ph.name, ph.mean_ms, n)
                    self._add("share:" + ph.name, ph.share, n)
                for name, per_s in t.throughput_per_s.items():
                    self._add("count:" + name, per_s, n)
                if t.gpu is not None and t.gpu.step_ms is not None:
                    self._gpu_step_ms.append(t.gpu.step_ms)
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
        samples = list(self.step_ms)
        if len(samples) < T.REGRESSION_MIN_STEPS.value:
            raise BaselineError(f"only {len(samples)} step{'s' if len(samples) != 1 else ''} seen past the job's "
                                f"first {T.REGRESSION_WARMUP_STEPS.value:g} (its warm-up): a baseline needs at least "
                                f"{T.REGRESSION_MIN_STEPS.value:g} (a job with steps: optimizer.step() or "
                                "tuimon.step(); or measure longer)")
        s = sorted(samples)
        t = self._training
        phase_names = [k[6:] for k in self._weighted if k.startswith("phase:")]
        phases = [PhaseRow(p, round(self._mean("share:" + p) or 0.0, 4), round(self._mean("phase:" + p) or 0.0, 3))
                  for p in phase_names]
        gpu_step = sorted(self._gpu_step_ms)
        return Baseline(
            version=BASELINE_VERSION,
            created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            source=self.source,
            step_ms=[round(v, 3) for v in samples],
            command=list(t.argv) if t is not None else [],
            gpu_models=sorted(self._gpu_models),
            rank=t.rank if t is not None else None,
            world_size=t.world_size if t is not None else None,
            steps=self.steps,
            step_time_ms=StepTimes(round(percentile(s, 50), 3), round(percentile(s, 95), 3),
                                   round(percentile(s, 99), 3), round(sum(s) / len(s), 3), round(samples[-1], 3)),
            steps_per_s=_round(self._mean("steps_per_s"), 3),
            throughput_per_s={k[6:]: round(self._mean(k), 3) for k in self._weighted if k.startswith("count:")},
            data_wait_share=_round(self._mean("data_wait_share"), 4),
            phases=phases,
            gpu_step_ms=round(percentile(gpu_step, 50), 3) if gpu_step else None,
            gpu_activity={f: round(sum(v) / len(v), 1) for f, v in self._activity.items() if v},
        )


def _round(v: float | None, digits: int) -> float | None:
    return None if v is None else round(v, digits)


def dumps(baseline: Baseline) -> str:
    """The file's text: one line of JSON."""
    return json.dumps({"format": FORMAT, **to_json(baseline)}, separators=(",", ":")) + "\n"


def save(baseline: Baseline, path: str, force: bool = False) -> None:
    """Written whole or not at all (a temporary file renamed into place): a full disk or a crash
    never leaves half a baseline where a good one was."""
    if os.path.exists(path) and not force:
        raise BaselineError(f"{path} exists: --force to overwrite it, or another -o")
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(dumps(baseline))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise BaselineError(f"cannot write {path}: {e.strerror or e}") from None


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
    good = [v for v in b.step_ms if v > 0 and v == v and v != float("inf")]
    if len(good) < T.REGRESSION_MIN_STEPS.value:
        raise BaselineError(f"{path} holds {len(good)} usable step times: too few to compare against "
                            f"(at least {T.REGRESSION_MIN_STEPS.value:g})")
    return b


def describe(b: Baseline) -> str:
    """A few lines saying what a baseline holds (`tuimon baseline show`, `baseline save`)."""
    st = b.step_time_ms
    lines = [f"baseline of {safe_text(' '.join(b.command), 200) or '(command unknown)'}",
             f"  measured {safe_text(b.created, 40)} from {safe_text(b.source, 200)}; {b.steps:,} steps "
             f"({len(b.step_ms):,} kept)"]
    if b.gpu_models:
        lines.append(f"  GPU: {safe_text(', '.join(b.gpu_models), 200)}")
    if st is not None:
        lines.append(f"  step time p50 {st.p50:.2f} ms, p95 {st.p95:.2f}, p99 {st.p99:.2f}, mean {st.mean:.2f}")
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
    if b.gpu_activity:
        lines.append("  GPU activity: " + ", ".join(f"{safe_text(k, 24)} {v:.0f}%" for k, v in b.gpu_activity.items()))
    return "\n".join(lines)

