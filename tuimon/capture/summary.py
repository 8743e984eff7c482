"""What a finished capture found, as lines a person can read without a GUI."""

from __future__ import annotations

import gzip
import json
import os

from ..channel.control import KIND_NSYS, State
from ..channel.text import safe_text
from . import nsys as nsys_tools


def torch_trace_summary(path: str, top: int = 5) -> dict:
    """Top operators by host time (CPU ops, inclusive) and kernels by device time, from a
    torch.profiler Chrome trace (gzip)."""
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        events = json.load(f).get("traceEvents", [])
    host: dict[str, list] = {}
    device: dict[str, list] = {}
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X" or not isinstance(e.get("dur"), (int, float)):
            continue
        table = host if e.get("cat") == "cpu_op" else device if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") else None
        if table is not None:
            row = table.setdefault(str(e.get("name", "?")), [0, 0.0])
            row[0] += 1
            row[1] += e["dur"] / 1e3

    def rows(table):
        return [{"name": k, "calls": c, "ms": round(ms, 3)} for k, (c, ms) in sorted(table.items(), key=lambda kv: -kv[1][1])[:top]]

    return {"top_device": rows(device), "top_host": rows(host)}


def summarize(state: State) -> dict:
    """{'file', 'size', 'lines'} for a done capture; reads files, may run nsys (slow: not on the UI thread)."""
    if state.kind == KIND_NSYS:
        return _nsys(state)
    path = state.path
    out = {"file": path, "size": os.path.getsize(path) if os.path.exists(path) else None, "lines": []}
    try:
        s = torch_trace_summary(path)
    except (OSError, ValueError, EOFError) as e:
        out["lines"].append(f"cannot read the trace: {e}")
        return out
    for title, key in (("top kernels by device time", "top_device"), ("top operators by host time (inclusive)", "top_host")):
        if s[key]:
            out["lines"].append(title + ":")
            out["lines"] += [f"  {r['ms']:>9.3f} ms  {r['calls']:>6}x  {safe_text(r['name'], 70)}" for r in s[key]]
    return out


def _nsys(state: State) -> dict:
    tool = nsys_tools.find_nsys()
    report = state.path  # <output>.<n>.nsys-rep, named by the probe
    if not report or not os.path.exists(report) or os.path.getsize(report) == 0:
        return {"file": None, "size": None,
                "lines": [f"nsys completes {os.path.basename(report or '?')} when the job exits"]}
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
