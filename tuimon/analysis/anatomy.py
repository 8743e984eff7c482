"""The step's anatomy over a window of steps: phase shares, the GPU side from CUDA events, the
syncs and their call sites, GPU memory. Pure: records in, model types out."""

from __future__ import annotations

from collections.abc import Callable

from ..model import GpuTimes, Memory, PhaseRow, Syncs, SyncSite
from .steps import StepRecord
from .summary import percentile

PHASE_ORDER = ("data", "forward", "backward", "optimizer", "sync", "other")


def _named(table: dict[int, float], name_of: Callable[[int], str]) -> dict[str, float]:
    return {name_of(k): v for k, v in table.items()}


def phases(steps: list[StepRecord], name_of: Callable[[int], str]) -> list[PhaseRow]:
    """Each phase's share of the window's step time and its mean per step; empty when the probe
    reported no phases (an older probe, or steps that ended before the anatomy started)."""
    measured = [s for s in steps if s.phases]
    total = sum(s.duration_ns for s in measured)
    if not measured or total <= 0:
        return []
    sums: dict[str, float] = {}
    for s in measured:
        for name, ns in _named(s.phases, name_of).items():
            sums[name] = sums.get(name, 0.0) + ns
    order = [p for p in PHASE_ORDER if p in sums] + sorted(set(sums) - set(PHASE_ORDER))
    return [PhaseRow(p, round(sums[p] / total, 4), round(sums[p] / len(measured) / 1e6, 3)) for p in order]


def gpu_times(steps: list[StepRecord], name_of: Callable[[int], str]) -> GpuTimes | None:
    rows = [(s, _named(s.values, name_of)) for s in steps if s.values]
    busy = [(v["gpu.busy_ns"], s.duration_ns) for s, v in rows if "gpu.busy_ns" in v and s.duration_ns > 0]
    if not busy:
        return None
    step_ns = sorted(v["gpu.step_ns"] for _, v in rows if "gpu.step_ns" in v)
    lag_ns = sorted(v["gpu.lag_ns"] for _, v in rows if "gpu.lag_ns" in v)
    share = min(1.0, sum(b for b, _ in busy) / sum(d for _, d in busy))
    return GpuTimes(steps=len(busy),
                    step_ms=round(percentile(step_ns, 50) / 1e6, 3) if step_ns else None,
                    busy_share=round(share, 4),
                    idle_share=round(1 - share, 4),
                    lag_ms=round(percentile(lag_ns, 50) / 1e6, 3) if lag_ns else None)


def syncs(steps: list[StepRecord], name_of: Callable[[int], str], top: int = 5) -> Syncs | None:
    measured = [s for s in steps if s.phases]
    if not measured:
        return None
    total = sum(s.duration_ns for s in measured)
    count = sum(_named(s.values, name_of).get("sync.count", 0.0) for s in measured)
    blocked = sum(_named(s.phases, name_of).get("sync", 0.0) for s in measured)
    sites: dict[str, float] = {}
    for s in measured:
        for site, n in _named(s.sites, name_of).items():
            sites[site] = sites.get(site, 0.0) + n
    ranked = sorted(sites.items(), key=lambda kv: -kv[1])[:top]
    return Syncs(per_step=round(count / len(measured), 2),
                 share=round(blocked / total, 4) if total > 0 else 0.0,
                 mean_us=round(blocked / count / 1e3, 1) if count else 0.0,
                 top=[SyncSite(site, round(n / len(measured), 2)) for site, n in ranked])


def memory(gauges: dict[int, float], name_of: Callable[[int], str]) -> Memory | None:
    g = _named(gauges, name_of)
    if "cuda.allocated" not in g:
        return None

    def get(name):
        v = g.get(name)
        return int(v) if v is not None else None

    return Memory(get("cuda.allocated"), get("cuda.reserved"), get("cuda.peak_allocated"),
                  get("cuda.alloc_retries"), get("cuda.ooms"))


def dataloader_workers(gauges: dict[int, float], name_of: Callable[[int], str]) -> int | None:
    v = _named(gauges, name_of).get("dataloader.workers")
    return int(v) if v is not None else None
