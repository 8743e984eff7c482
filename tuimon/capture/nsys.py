"""Nsight Systems: the launch command, the reports of a run, and their summaries (nsys stats)."""

from __future__ import annotations

import csv
import glob
import io
import os
import shutil
import threading
from typing import Any

from .commands import run

BUNDLED = ["/opt/nvidia/nsight-systems/*/bin/nsys", "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys"]


def find_nsys() -> str | None:
    found = shutil.which("nsys")
    if found:
        return found
    for pattern in BUNDLED:
        for path in sorted(glob.glob(pattern), reverse=True):
            if os.access(path, os.X_OK):
                return path
    return None


def stats(nsys: str, report: str, top: int = 10, timeout: float = 120,
          cancel: threading.Event | None = None) -> dict:
    """Top kernels, NVTX ranges and CUDA API calls of a report, from `nsys stats` (CSV): each
    report's rows, and NAME_error for one that failed with none; kernel_records (all kernel rows'
    instances) and kernel_launches (the API calls that launch one kernel each), each where its
    report ran and has the column. Raises CommandFailed on a timeout or a cancel."""
    out: dict[str, Any] = {}
    for name in ("cuda_gpu_kern_sum", "nvtx_sum", "cuda_api_sum"):
        # --force-export: the first call's export can move the report's mtime, and nsys refuses
        # to reuse an export "older than input file": every call exports again.
        p = run([nsys, "stats", "--report", name, "--format", "csv", "--output", "-", "--force-export=true", report],
                timeout, cancel)
        rows = _csv_rows(p.stdout)
        if name == "cuda_gpu_kern_sum" and p.returncode == 0:
            out["kernel_records"] = _total(rows, "Instances")
        elif name == "cuda_api_sum" and p.returncode == 0:
            out["kernel_launches"] = _total([r for r in rows if launches_one_kernel(r.get("Name") or "")], "Num Calls")
        out[name] = [{"name": r.get("Name") or r.get("Range", ""), "time_pct": r.get("Time (%)", ""),
                      "total_ns": r.get("Total Time (ns)", ""),
                      "instances": r.get("Instances") or r.get("Num Calls", "")}
                     for r in rows[:top]]
        if p.returncode != 0 and not rows:
            out[name + "_error"] = (p.stderr or p.stdout).strip()[-300:]
    return out


# A report can hold fewer kernels than the window launched: nsys keeps CUDA trace records in a fixed set
# of CUPTI buffers (50 by its diagnostics) and, unless told to flush periodically (--cuda-flush-interval,
# which costs every step: docs/nsys-sessions.md), drops what does not fit. Seen on an H200: a 20-step
# window of ~66,000 kernels kept the main thread's and lost the autograd thread's, so the top kernels
# were wrong. The window's end alone also leaves launches without a kernel row (those still queued), so a
# loss is said past both floors: more kernels than a stream queues ahead (~1,000) and 5% of the window's.
# Exact only with nsys's default graph tracing (--cuda-graph-trace=node adds a row per graph kernel: a loss
# can hide) and no stream capture in the window (a launch being captured runs no kernel then).
LOST_MIN_KERNELS = 1000
LOST_MIN_SHARE = 0.05


def launches_one_kernel(api: str) -> bool:
    """A CUDA API call that launches one kernel (runtime or driver, cooperative too): a complete
    report has a kernel row for each. A graph launch (many kernels) is not one."""
    return "LaunchKernel" in api or "LaunchCooperativeKernel" in api


def kernels_lost(s: dict) -> tuple[int, int] | None:
    """(kernels recorded, kernels launched) when stats() shows that nsys dropped kernel records (the
    rule above), else None."""
    kept, launched = s.get("kernel_records"), s.get("kernel_launches")
    if not isinstance(kept, int) or not isinstance(launched, int):
        return None
    lost = launched - kept
    return (kept, launched) if lost > LOST_MIN_KERNELS and lost > LOST_MIN_SHARE * launched else None


def _total(rows: list[dict], column: str) -> int | None:
    """The column's sum over the rows; None when a row lacks it or holds no whole number (a report of
    another shape: nothing to compare, rather than a short count read as a loss)."""
    n = 0
    for r in rows:
        try:
            n += int(str(r[column]).replace(",", ""))
        except (KeyError, TypeError, ValueError):
            return None
    return n


def _csv_rows(text: str) -> list[dict]:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Time (%)") or line.startswith('"Time (%)"')), None)
    if start is None:
        return []
    return list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
