"""The JSON document of a view (`tuimon attach --once --json`): the training snapshot's fields at
the top level, as scripts have read them since layout v1 (without a channel: `hot_lines` and
`samples` from outside, and `outside`, how they were sampled or why not), then the process, the
GPUs, the verdict, and any source that failed."""

from __future__ import annotations

from ..analysis import memory as mem
from ..model import NA, RankRow, to_json
from .state import View


def view_json(view: View, asked_pid: int | None = None) -> dict:
    t, p = view.training, view.process
    doc: dict = {"pid": t.pid if t else p.pid if p else asked_pid}
    if t is not None:
        doc.update(to_json(t))
    else:
        doc["state"] = "alive" if p is not None and p.alive else "exited"
        if view.outside is not None:  # the main thread's lines, sampled from outside (py-spy)
            outside = to_json(view.outside)
            doc["hot_lines"], doc["samples"] = outside.pop("hot_lines"), view.outside.samples
            doc["outside"] = outside
    doc["channel"] = to_json(view.channel) if view.channel is not None else to_json(NA("not looked for"))
    if view.shown_why:
        doc["shown_why"] = view.shown_why
    used, total = view.nvml_memory  # the allocator's numbers (from the probe) beside NVML's
    m = t.memory if t is not None else None
    doc["memory"] = {**(to_json(m) if m else {}), "nvml_process_used": used,
                     "gpu_total": total, "headroom": total - used if used is not None and total else None,
                     "peak_share": mem.peak_share(m) if m else None, "forecast": mem.forecast(m)}
    doc["process"] = to_json(p)
    doc["gpus"] = [to_json(g.latest) for g in view.gpus]
    doc["target_gpus"] = view.target_gpus
    doc["verdict"] = to_json(view.verdict)
    doc["capture"] = to_json(view.capture)
    doc["problems"] = dict(view.problems)
    if view.gpu_note:
        doc["gpu_note"] = view.gpu_note
    if view.baseline is not None:
        doc["baseline"] = to_json(view.baseline)
    doc["ranks"] = [_rank_json(r) for r in view.ranks]
    doc["straggler"] = ({"rank": view.straggler.rank, "pid": view.straggler.pid, "ratio": view.straggler.ratio,
                         "own_ms": view.straggler.own_ms, "others_ms": view.straggler.others_ms,
                         "others_measured_ms": view.straggler.others_measured_ms, "slower_ms": view.straggler.slower}
                        if view.straggler is not None and view.verdict.code == "straggler" else None)
    doc["comm_share"] = view.comm_share if view.ranks else (t.comm.share if t is not None and t.comm else None)
    doc["stall"] = to_json(view.stall)
    doc["job_end"] = to_json(view.job_end)
    return doc


def _rank_json(r: RankRow) -> dict:
    total = sum(r.phases.values())
    return {"rank": r.rank, "pid": r.pid, "state": r.state, "gpu": r.gpu, "sm_active": r.sm_active,
            "steps": r.steps, "step_time_ms": {"p50": r.step_p50_ms, "p95": r.step_p95_ms, "mean": r.step_mean_ms},
            "data_wait_share": r.data_wait_share, "own_ms": None if r.own_ms is None else round(r.own_ms, 3),
            "comm_ms": r.comm_ms, "comm_share": r.comm_share, "ddp_backward_ms": r.ddp_backward_ms,
            "since_step_s": r.since_step_s, "stalled": r.stalled,
            "now": {"phase": r.now_phase, "phase_s": r.now_phase_s, "where": r.where, "context": r.context,
                    "waiting_in": r.waiting_in}
            if r.now_phase is not None else None,
            "phases": {name: {"mean_ms": ms, "share": round(ms / total, 4) if total > 0 else None}
                       for name, ms in r.phases.items()}}
