"""Hand-made evidence by flat names, as the tests write it: `flat_evidence(steps=50, sm_active=97,
worker_states=[(7, "sleeping", 0.0)])` is the Evidence whose parts hold those values
(tuimon/analysis/verdicts/evidence.py). A part given whole (as `e.__dict__` holds it) is the base
that flat names of the same part change."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from tuimon.analysis.verdicts import Evidence, StalledRank, WaitingRank, WorkerState
from tuimon.model import SyncSite

# flat name -> (part, its field there); a name not listed is Evidence's own (has_channel, a part)
FLAT = {
    **{n: ("window", n) for n in ("steps", "step_ms", "data_share", "phases", "optimizer", "copies", "ops",
                                  "kernels_per_step", "kernel_us", "data_parallel")},
    "sync_per_step": ("sync", "per_step"), "sync_share": ("sync", "share"), "sync_mean_us": ("sync", "mean_us"),
    "sync_sites": ("sync", "sites"),
    **{n: ("gpu", n) for n in ("gpm", "sm_active", "tensor_active", "fp32_active", "fp16_active", "dram_bw",
                               "util_gpu", "pcie_rx", "power_share", "cuda", "memory")},
    "gpu_busy_events": ("gpu", "busy_events"),
    **{n: ("host", n) for n in ("loop_cpu", "loop_cpu_wait", "job_cpu", "cpus", "process_state", "hot")},
    "workers": ("workers", "count"), "workers_cpu": ("workers", "cpu"), "workers_alive": ("workers", "alive"),
    "worker_states": ("workers", "states"),
    "comm_share": ("comm", "share"), "comm_mb": ("comm", "mb"), "comm_gpu": ("comm", "gpu"),
    "ranks": ("ranks", "count"), "straggler": ("ranks", "straggler"), "stalled_ranks": ("ranks", "stalled"),
    "holding_ranks": ("ranks", "holding"), "waiting_ranks": ("ranks", "waiting"),
    "job_end": ("present", "job_end"), "ran_as": ("present", "ran_as"), "stall": ("present", "stall"),
    "now": ("present", "step"),
    "outside": ("outside", "sampled"), "outside_samples": ("outside", "samples"), "outside_why": ("outside", "why"),
}
ROWS = {  # lists of plain tuples, as the tests write them, to their named rows
    "sync_sites": lambda t: SyncSite(site=t[0], per_step=t[1], share=t[2] if len(t) > 2 else None),
    "worker_states": lambda t: WorkerState(*t),
    "stalled_ranks": lambda t: StalledRank(*t),
    "waiting_ranks": lambda t: WaitingRank(*t),
}
PARTS = {f.name: f.default_factory for f in fields(Evidence) if f.name != "has_channel"}


def flat_evidence(**given: Any) -> Evidence:
    own: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {}
    for name, value in given.items():
        if name in PARTS and type(value) is type(PARTS[name]()):  # a part given whole
            own[name] = value
        elif name in FLAT:
            part, field = FLAT[name]
            parts.setdefault(part, {})[field] = [ROWS[name](v) for v in value] if name in ROWS else value
        else:
            own[name] = value
    for part, values in parts.items():
        own[part] = replace(own.get(part) or PARTS[part](), **values)
    return Evidence(**own)
