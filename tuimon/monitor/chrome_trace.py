"""A Timeline (timeline.py) as a Chrome trace (JSON), which Perfetto and chrome://tracing open.

One process per process of the job (named by rank), with its tracks:
- "steps": a slice per step ("step 812", args: its number and what the probe measured of it:
  syncs, bytes and calls handed to collectives, GPU time), and inside it a slice per phase
  ("forward", "backward", "sync", "comm", ...) lasting the phase's time in the step. A step's
  phases add up to it, laid end to end in a fixed order (vocab.PHASES): their lengths are measured,
  their order within the step is not (the probe keeps totals per step).
- "data waits": the loop's waits for its DataLoader, at their real times (live jobs);
- "ranges <thread>": tuimon.range ranges, at their real times and nesting (live jobs).
GPU metrics are counter tracks of a process per GPU. Times are CLOCK_MONOTONIC, in microseconds.
"""

from __future__ import annotations

from ..model.vocab import PHASES
from .timeline import Timeline

STEPS_TID, DATA_TID = (1 << 22) + 1, (1 << 22) + 2  # above any Linux thread id (pid_max is at most 2^22)
GPU_PID_BASE = (1 << 22) + 16  # above any Linux PID (and the tids above)
LAYOUT_NOTE = "phases: each one's time in the step, laid end to end (their order within the step is not measured)"


def _us(ns: int) -> float:
    return round(ns / 1000, 3)


def chrome_trace(tl: Timeline) -> dict:
    events: list[dict] = []
    for p in tl.processes:
        label = f"rank {p.rank} (PID {p.pid})" if p.rank is not None else f"PID {p.pid}"
        events += _meta(p.pid, None, "process_name", name=label)
        events += _meta(p.pid, None, "process_sort_index", sort_index=p.rank if p.rank is not None else p.pid)
        events += _meta(p.pid, STEPS_TID, "thread_name", name="steps" + (" and phases" if p.phases_known else ""))
        events += _meta(p.pid, STEPS_TID, "thread_sort_index", sort_index=0)
        for s in sorted(p.steps.values(), key=lambda s: s.index):
            events.append({"ph": "X", "cat": "step", "name": f"step {s.index}", "pid": p.pid, "tid": STEPS_TID,
                           "ts": _us(s.t0), "dur": _us(s.t1 - s.t0),
                           "args": {"step": s.index, "ms": round((s.t1 - s.t0) / 1e6, 3), **_values(s.values)}})
            at = s.t0
            for phase in sorted(s.phases, key=_phase_rank):
                ns = min(s.phases[phase], s.t1 - at)  # (never past the step's end: the slices must nest)
                if ns <= 0:
                    continue
                events.append({"ph": "X", "cat": "phase", "name": phase, "pid": p.pid, "tid": STEPS_TID,
                               "ts": _us(at), "dur": _us(ns),
                               "args": {"step": s.index, "ms": round(ns / 1e6, 3),
                                        "share": round(ns / (s.t1 - s.t0), 4)}})
                at += ns
        if p.data_waits:
            events += _meta(p.pid, DATA_TID, "thread_name", name="data waits")
            events += _meta(p.pid, DATA_TID, "thread_sort_index", sort_index=1)
            events += [{"ph": "X", "cat": "data_wait", "name": "data wait", "pid": p.pid, "tid": DATA_TID,
                        "ts": _us(t0), "dur": _us(t1 - t0), "args": {"os_thread": tid}}
                       for tid, t0, t1 in p.data_waits]
        for tid in sorted({r[1] for r in p.ranges}):
            events += _meta(p.pid, tid, "thread_name", name=f"ranges on thread {tid}")
        # (outer ranges first at equal starts, so the viewer nests them as they were)
        for name, tid, depth, t0, t1 in sorted(p.ranges, key=lambda r: (r[3], r[2])):
            events.append({"ph": "X", "cat": "range", "name": name, "pid": p.pid, "tid": tid, "ts": _us(t0),
                           "dur": _us(t1 - t0), "args": {"depth": depth}})
    named: set[int] = set()
    for c in tl.counters:
        pid = GPU_PID_BASE + c.gpu
        if pid not in named:
            named.add(pid)
            events += _meta(pid, None, "process_name", name=f"GPU {c.gpu}" + (f" ({c.gpu_name})" if c.gpu_name else ""))
            events += _meta(pid, None, "process_sort_index", sort_index=100_000 + c.gpu)
        events += [{"ph": "C", "name": f"{c.name} ({c.unit})", "pid": pid, "ts": _us(t), "args": {"value": v}}
                   for t, v in c.points]
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"source": tl.source, "clock": "CLOCK_MONOTONIC", "layout": LAYOUT_NOTE,
                          "notes": list(tl.notes)}}


def _meta(pid: int, tid: int | None, what: str, **args: object) -> list[dict]:
    e = {"ph": "M", "name": what, "pid": pid, "args": args}
    if tid is not None:
        e["tid"] = tid
    return [e]


def _phase_rank(name: str) -> tuple[int, str]:
    return (PHASES.index(name) if name in PHASES else len(PHASES), name)


def _values(values: dict[str, float]) -> dict:
    """The probe's numbers about the step, named for a person ('comm.gpu_ns' -> 'comm.gpu_ms')."""
    out = {}
    for k, v in sorted(values.items()):
        if k.endswith("_ns"):
            out[k[:-3] + "_ms"] = round(v / 1e6, 3)
        else:
            out[k] = v
    return out
