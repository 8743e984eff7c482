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
    report's rows, and NAME_error for one that failed with none. Raises CommandFailed on a timeout
    or a cancel."""
    out: dict[str, Any] = {}
    for name in ("cuda_gpu_kern_sum", "nvtx_sum", "cuda_api_sum"):
        # --force-export: the first call's export can move the report's mtime, and nsys refuses
        # to reuse an export "older than input file": every call exports again.
        p = run([nsys, "stats", "--report", name, "--format", "csv", "--output", "-", "--force-export=true", report],
                timeout, cancel)
        rows = _csv_rows(p.stdout)
        out[name] = [{"name": r.get("Name") or r.get("Range", ""), "time_pct": r.get("Time (%)", ""),
                      "total_ns": r.get("Total Time (ns)", ""),
                      "instances": r.get("Instances") or r.get("Num Calls", "")}
                     for r in rows[:top]]
        if p.returncode != 0 and not rows:
            out[name + "_error"] = (p.stderr or p.stdout).strip()[-300:]
    return out


def _csv_rows(text: str) -> list[dict]:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Time (%)") or line.startswith('"Time (%)"')), None)
    if start is None:
        return []
    return list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
