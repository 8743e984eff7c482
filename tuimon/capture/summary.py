"""What a finished capture found, as lines a person can read without a GUI."""

from __future__ import annotations

import json
import os

from ..channel.control import KIND_NSYS, State
from ..channel.text import safe_text
from . import nsys as nsys_tools


def torch_summary_path(trace: str) -> str:
    return trace.replace(".pt.trace.json.gz", ".summary.json")


def summarize(state: State, since_ns_report: str | None = None) -> dict:
    """{'file', 'size', 'lines'} for a done capture; reads files, may run nsys (slow: not on the UI thread)."""
    if state.kind == KIND_NSYS:
        return _nsys(state)
    path = state.path
    out = {"file": path, "size": os.path.getsize(path) if os.path.exists(path) else None, "lines": []}
    try:
        with open(torch_summary_path(path)) as f:
            s = json.load(f)
    except (OSError, ValueError) as e:
        out["lines"].append(f"no summary: {e}")
        return out
    for title, key in (("top operators by device time", "top_device"), ("top operators by host time", "top_host")):
        rows = s.get(key) or []
        if rows:
            out["lines"].append(title + ":")
            out["lines"] += [f"  {r['ms']:>9.3f} ms  {r['calls']:>6}x  {safe_text(str(r['name']), 70)}" for r in rows[:5]]
    return out


def _nsys(state: State) -> dict:
    tool = nsys_tools.find_nsys()
    found = nsys_tools.reports(state.path) if state.path else []
    if not found:
        return {"file": None, "size": None, "lines": [f"no .nsys-rep yet for {state.path or '(no output name)'}"]}
    report = found[-1]
    out = {"file": report, "size": os.path.getsize(report), "lines": []}
    if tool is None:
        out["lines"].append("nsys not found here: cannot summarise")
        return out
    s = nsys_tools.stats(tool, report)
    for title, key in (("top kernels", "cuda_gpu_kern_sum"), ("NVTX ranges", "nvtx_sum")):
        out["lines"].append(title + ":")
        out["lines"] += [f"  {r['time_pct']:>6}%  {r['instances']:>6}x  {safe_text(r['name'], 70)}" for r in s[key][:5]]
        if s.get(key + "_error"):
            out["lines"].append("  " + safe_text(s[key + "_error"], 200))
    return out
