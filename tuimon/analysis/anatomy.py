"""The step's anatomy over a window of steps: phase shares, the GPU side from CUDA events, the
syncs and their call sites, GPU memory. Pure: records in, model types out."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..model import (
    CommTimes,
    CopyTimes,
    DataParallelTimes,
    GpuTimes,
    HotLine,
    OpCounts,
    PhaseRow,
    Syncs,
    SyncSite,
)
from ..model.vocab import HOT_CONTEXT, PHASES
from .steps import StepRecord
from .summary import percentile


def _named(table: dict[int, float], name_of: Callable[[int], str]) -> dict[str, float]:
    return {name_of(k): v for k, v in table.items()}


def _total_by_name(tables: Iterable[dict[int, float]], name_of: Callable[[int], str]) -> dict[str, float]:
    """The tables (name id -> number) summed, then named: one name lookup per id, not per step
    (this runs every cycle over the window's 100 steps)."""
    by_id: dict[int, float] = {}
    for table in tables:
        for k, v in table.items():
            by_id[k] = by_id.get(k, 0.0) + v
    out: dict[str, float] = {}
    for k, v in by_id.items():
        name = name_of(k)
        out[name] = out.get(name, 0.0) + v
    return out


class Window:
    """The window's steps, with what its summaries share worked out once: the steps with phases,
    their phase totals by name, and which ids each value name has (this runs every cycle over the
    window's 100 steps; each summary summing the phases again was a quarter of the snapshot)."""

    def __init__(self, steps: list[StepRecord], name_of: Callable[[int], str]):
        self.steps, self.name_of = steps, name_of
        self.measured = [s for s in steps if s.phases]
        self.total_ns = sum(s.duration_ns for s in self.measured)
        self.phase_ns = _total_by_name((s.phases for s in self.measured), name_of)
        names = {k: name_of(k) for k in {k for s in steps for k in s.values}}
        # Each value name's (step, value) in step order, read in one pass (a step holding a name under
        # two ids: the value that came last); the summaries read their names' lists.
        self._values: dict[str, list[tuple[StepRecord, float]]] = {}
        for st in steps:
            mine = {names[k]: v for k, v in st.values.items()}
            for name, v in mine.items():
                self._values.setdefault(name, []).append((st, v))

    def _of(self, name: str, measured: bool = False) -> list[float]:
        """The window's values of a name, step by step (measured: of the steps with phases only)."""
        return [v for st, v in self._values.get(name, ()) if st.phases or not measured]

    def phases(self) -> list[PhaseRow]:
        """Each phase's share of the window's step time and its mean per step; empty when the probe
        reported no phases (an older probe, or steps that ended before the anatomy started)."""
        measured, total, sums = self.measured, self.total_ns, self.phase_ns
        if not measured or total <= 0:
            return []
        order = [p for p in PHASES if p in sums] + sorted(set(sums) - set(PHASES))
        return [PhaseRow(p, round(sums[p] / total, 4), round(sums[p] / len(measured) / 1e6, 3)) for p in order]

    def gpu_times(self) -> GpuTimes | None:
        busy = [(b, st.duration_ns) for st, b in self._values.get("gpu.busy_ns", ()) if st.duration_ns > 0]
        if not busy:
            return None
        step_ns = sorted(self._of("gpu.step_ns"))
        lag_ns = sorted(self._of("gpu.lag_ns"))
        share = min(1.0, sum(b for b, _ in busy) / sum(d for _, d in busy))
        return GpuTimes(steps=len(busy),
                        step_ms=round(percentile(step_ns, 50) / 1e6, 3) if step_ns else None,
                        step_mean_ms=round(sum(step_ns) / len(step_ns) / 1e6, 3) if step_ns else None,
                        busy_share=round(share, 4),
                        idle_share=round(1 - share, 4),
                        lag_ms=round(percentile(lag_ns, 50) / 1e6, 3) if lag_ns else None)

    def syncs(self, top: int = 5) -> Syncs | None:
        measured, total = self.measured, self.total_ns
        if not measured:
            return None
        count = sum(self._of("sync.count", measured=True))
        blocked = self.phase_ns.get("sync", 0.0)
        sites = _total_by_name((s.sites for s in measured), self.name_of)
        # each site's own wait (SITE t0): its share of the window's step time, ranked by it; none where
        # the probe did not time its sites (an older one, a recording of it): ranked by calls then
        waits = _total_by_name((s.site_ns for s in measured), self.name_of)
        timed = bool(waits) and total > 0
        ranked = sorted(sites.items(), key=lambda kv: (-waits.get(kv[0], 0.0), -kv[1]) if timed else -kv[1])[:top]
        return Syncs(per_step=round(count / len(measured), 2),
                     share=round(blocked / total, 4) if total > 0 else 0.0,
                     mean_us=round(blocked / count / 1e3, 1) if count else 0.0,
                     top=[SyncSite(site, round(n / len(measured), 2),
                                   round(waits.get(site, 0.0) / total, 4) if timed else None) for site, n in ranked])

    def comm(self) -> CommTimes | None:
        """Time in collectives per step: the "comm" phase (host) and the CUDA events' GPU time (over
        the steps they resolved in); None when the window has none (a job of one process)."""
        measured = self.measured
        if not measured:
            return None
        host = self.phase_ns.get("comm", 0.0) / len(measured)
        calls, gpu = self._of("comm.calls", measured=True), self._of("comm.gpu_ns", measured=True)
        if not host and not calls and not gpu:
            return None
        step_ns = self.total_ns / len(measured)
        gpu_ns = sum(gpu) / len(gpu) if gpu else None
        per_step = gpu_ns if gpu_ns is not None else host
        nbytes = sum(self._of("comm.bytes", measured=True)) / len(measured)
        return CommTimes(host_ms=round(host / 1e6, 3),
                         gpu_ms=round(gpu_ns / 1e6, 3) if gpu_ns is not None else None,
                         share=round(min(1.0, per_step / step_ns), 4) if step_ns > 0 else 0.0,
                         mb_per_step=round(nbytes / 2**20, 2),
                         calls_per_step=round(sum(calls) / len(measured), 2))

    def copies(self) -> CopyTimes | None:
        """Host <-> GPU copies per step over the window (the copy phase and the probe's byte counts);
        None when the window has none."""
        measured = self.measured
        if not measured:
            return None
        h2d, pageable, blocking, calls, d2h = (sum(self._of(name, measured=True)) for name in (
            "copy.h2d_bytes", "copy.h2d_pageable_bytes", "copy.h2d_blocking_bytes", "copy.h2d_calls", "copy.d2h_bytes"))
        copy_ns = self.phase_ns.get("copy", 0.0)
        if not (h2d or d2h or copy_ns):
            return None
        total, n = self.total_ns, len(measured)
        return CopyTimes(share=round(copy_ns / total, 4) if total > 0 else 0.0, ms=round(copy_ns / n / 1e6, 3),
                         h2d_mb=round(h2d / n / 2**20, 2), pageable=round(pageable / h2d, 3) if h2d else 0.0,
                         blocking=round(blocking / h2d, 3) if h2d else 0.0, calls=round(calls / n, 2),
                         d2h_mb=round(d2h / n / 2**20, 2))

    def data_parallel(self) -> DataParallelTimes | None:
        """torch.nn.DataParallel's parts per step over the window (probe/data_parallel.py); None when
        none of the window's steps ran one."""
        measured = self.measured
        devices = self._of("dp.devices", measured=True)
        if not measured or not devices or self.total_ns <= 0:
            return None
        n, total = len(measured), self.total_ns
        rep, sc, ap, ga = (sum(self._of(f"dp.{p}_ns", measured=True)) for p in ("replicate", "scatter", "apply", "gather"))
        gpu = self._of("dp.gpu_ns")
        return DataParallelTimes(devices=int(max(devices)), steps=len(devices), replicate_ms=round(rep / n / 1e6, 3),
                                 scatter_ms=round(sc / n / 1e6, 3), apply_ms=round(ap / n / 1e6, 3),
                                 gather_ms=round(ga / n / 1e6, 3), replicate_share=round(rep / total, 4),
                                 scatter_gather_share=round((sc + ga) / total, 4), apply_share=round(ap / total, 4),
                                 gpu_ms=round(sum(gpu) / len(gpu) / 1e6, 3) if gpu else None, gpu_steps=len(gpu))


def ddp_backward_ms(gauges: dict[int, float], name_of: Callable[[int], str]) -> float | None:
    """DDP's own timing of its backward's compute, its last sampled iteration (probe/comm.py)."""
    v = _named(gauges, name_of).get("ddp.backward_compute_ns")
    return round(v / 1e6, 3) if v is not None else None


def dataloader_workers(gauges: dict[int, float], name_of: Callable[[int], str]) -> int | None:
    v = _named(gauges, name_of).get("dataloader.workers")
    return int(v) if v is not None else None


def hot_lines(records: Iterable[tuple[int, int, int, int, float]], name_of: Callable[[int], str],
              phase_names: tuple[str, ...], per_phase: int = 5) -> tuple[list[HotLine], int]:
    """The lines where the loop thread's samples fell: records (t, phase, line id, how, samples) of a
    span of time; per phase its top `per_phase`, the largest first, each with how the thread was there
    (hows: layout.HOWS order, python, native, waiting) and, for a library's line, the job's own line
    that led there (after HOT_CONTEXT in its name: channel/layout.py); and their samples."""
    by: dict[tuple[int, int], list[float]] = {}  # (phase, line id) -> samples by how
    for _, phase, nid, how, n in records:
        if 0 <= how < 3 and n > 0:  # (a record of a damaged channel is left out, not divided by)
            c = by.get((phase, nid))
            if c is None:  # (not setdefault: its default list was built for every record)
                c = by[(phase, nid)] = [0.0, 0.0, 0.0]
            c[how] += n
    total = sum(sum(c) for c in by.values())
    if not total:
        return [], 0
    per: dict[int, float] = {}
    lines: dict[int, list[tuple[int, list[float]]]] = {}  # phase -> its (line id, samples by how), in by's order
    for (phase, nid), c in by.items():
        per[phase] = per.get(phase, 0.0) + sum(c)
        lines.setdefault(phase, []).append((nid, c))
    rows: list[HotLine] = []
    for phase in sorted(per, key=lambda k: -per[k]):
        mine = sorted(lines[phase], key=lambda x: -sum(x[1]))
        for nid, c in mine[:per_phase]:
            n = sum(c)
            line, _, context = name_of(nid).partition(HOT_CONTEXT)
            rows.append(HotLine(phase=phase_names[phase] if 0 <= phase < len(phase_names) else f"phase {phase}",
                                line=line, samples=int(n), share=round(n / total, 4),
                                phase_share=round(n / per[phase], 4), python=round(c[0] / n, 3),
                                native=round(c[1] / n, 3), waiting=round(c[2] / n, 3), context=context))
    return rows, int(total)


def optimizer(gauges: dict[int, float], name_of: Callable[[int], str]) -> str | None:
    """The lead optimizer as the probe said it: 'SGD foreach=False fused=False params=600'."""
    said = [n for k in gauges if (n := name_of(k)).startswith("optimizer:")]
    return said[-1].removeprefix("optimizer:") if said else None


def how_of(h: HotLine) -> tuple[str, float]:
    """How the loop thread mostly was at a line: ('Python' | 'in a native call' | 'blocked in a
    call', its share of the line's samples)."""
    share, word = max((h.python, "Python"), (h.native, "in a native call"), (h.waiting, "blocked in a call"))
    return word, share


def op_counts(gauges: dict[int, float], steps_of: dict[int, int], name_of: Callable[[int], str]) -> OpCounts | None:
    """The last counted step's ops (probe/ops.py's gauges; steps_of: the step each gauge's value came in)."""
    named = {name_of(k): (v, steps_of.get(k, 0)) for k, v in gauges.items()}
    total = named.get("ops.count")
    if total is None:
        return None
    step = total[1]
    mine = {n: int(v) for n, (v, s) in named.items() if s == step}
    return OpCounts(step=step, total=int(total[0]),
                    by_phase={n.removeprefix("ops.phase."): v for n, v in mine.items() if n.startswith("ops.phase.")},
                    lines=dict(sorted(((n.removeprefix("ops.line:"), v) for n, v in mine.items()
                                       if n.startswith("ops.line:")), key=lambda x: -x[1])))
