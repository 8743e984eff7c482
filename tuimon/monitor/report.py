"""The JSON document of a view (`tuimon attach --once --json`): the training snapshot's fields at
the top level, as scripts have read them since layout v1, then the process, the GPUs, the
verdict, and any source that failed."""

from __future__ import annotations

from ..model import NA, to_json
from .state import View


def view_json(view: View, asked_pid: int | None = None) -> dict:
    t, p = view.training, view.process
    doc: dict = {"pid": t.pid if t else p.pid if p else asked_pid}
    if t is not None:
        doc.update(to_json(t))
    else:
        doc["state"] = "alive" if p is not None and p.alive else "exited"
    doc["channel"] = to_json(view.channel) if view.channel is not None else to_json(NA("not looked for"))
    if view.shown_why:
        doc["shown_why"] = view.shown_why
    used, total = view.nvml_memory  # the allocator's numbers (from the probe) beside NVML's
    doc["memory"] = {**(to_json(t.memory) if t is not None and t.memory else {}), "nvml_process_used": used,
                     "gpu_total": total, "headroom": total - used if used is not None and total else None}
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
    return doc
