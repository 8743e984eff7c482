"""What a finished capture found, as lines a person can read without a GUI. Slow (a child
process reads the trace or the memory snapshot; nsys stats runs twice): the monitor calls it on
its summary worker, never on the sampler thread."""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import replace

from ..channel.text import safe_text
from ..model import CaptureStatus, CaptureSummary, KernelRow
from ..model.units import human_bytes
from . import nsys as nsys_tools
from .commands import CommandFailed, run
from .ncu import function_name

TIMEOUT_S = 120.0


def summarize(status: CaptureStatus, timeout: float = TIMEOUT_S, cancel: threading.Event | None = None) -> CaptureSummary:
    """The summary of a done capture. Never raises: a failure is a 'failed' summary with the reason."""
    try:
        if status.kind == "nsys":
            return _nsys(status.path, timeout, cancel)
        if status.kind == "memory":
            return _memory(status.path, timeout, cancel)
        return _torch(status.path, status, timeout, cancel)
    except CommandFailed as e:
        return CaptureSummary(state="failed", file=status.path or None, size=_size(status.path),
                              error=f"summary {e}")


def _size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def _torch(path: str, status: CaptureStatus, timeout: float, cancel: threading.Event | None) -> CaptureSummary:
    size = _size(path)
    if size is None:
        return CaptureSummary(state="failed", file=path, size=None, error=f"the trace {path} is not there")
    done = run([sys.executable, "-m", "tuimon.capture.trace_summary", path], timeout, cancel)
    if done.returncode != 0:
        return CaptureSummary(state="failed", file=path, size=size,
                              error=safe_text(done.stderr.strip()[-300:] or "the trace reader failed"))
    s = json.loads(done.stdout)
    lines = []
    steps = status.last_step - status.first_step + 1 if status.first_step >= 1 and status.last_step >= status.first_step else 0
    per_step = kernel_us = None
    if s["kernels"]:
        kernel_us = s["kernel_ms"] * 1e3 / s["kernels"]
        per_step = s["kernels"] / steps if steps else None
        per = f", {per_step:,.0f} per step" if per_step else ""
        lines.append(f"{s['kernels']:,} kernels{per}, {kernel_us:.1f} us each on average")
    for title, key in (("top kernels by device time", "top_device"), ("top operators by self time on the host", "top_host_self")):
        if s[key]:
            lines.append(title + ":")
            lines += [f"  {r['ms']:>9.3f} ms  {r['calls']:>6}x  {safe_text(r['name'], 70)}" for r in s[key]]
    kernels = [KernelRow(name=str(r["name"]), calls=int(r["calls"]), ms=float(r["ms"]),
                         function_calls=int(r.get("function_calls") or r["calls"])) for r in s.get("top_kernels", [])]
    return CaptureSummary(state="done", file=path, size=size, lines=lines, kernels_per_step=per_step,
                          kernel_us=kernel_us, kernels=kernels)


VIEWER = "https://pytorch.org/memory_viz"


def _memory(path: str, timeout: float, cancel: threading.Event | None) -> CaptureSummary:
    size = _size(path)
    if size is None:
        return CaptureSummary(state="failed", file=path, error=f"the snapshot {path} is not there")
    done = run([sys.executable, "-m", "tuimon.capture.memory_summary", path], timeout, cancel)
    if done.returncode != 0:
        return CaptureSummary(state="failed", file=path, size=size,
                              error=safe_text(done.stderr.strip()[-300:] or "the snapshot reader failed"))
    return CaptureSummary(state="done", file=path, size=size, lines=memory_lines(json.loads(done.stdout)))


def memory_lines(s: dict) -> list[str]:
    """A memory window's summary (capture/memory_summary.py's JSON) as lines."""
    if s["peak_at"] >= 0:
        lines = [f"peak {human_bytes(s['peak'])} live at event {s['peak_at'] + 1:,} of {s['events']:,} ({human_bytes(s['at_start'])} "
                 f"live when the window opened; {s['allocs']:,} allocations in it)"]
    else:
        lines = [f"peak {human_bytes(s['peak'])} live when the window opened ({s['allocs']:,} allocations in it, none "
                 "went higher)"]
    if s["groups"]:
        lines.append("largest live allocations at the peak, by the line that made them:")
        lines += [f"  {human_bytes(g['bytes']):>10}  {g['count']:>5}x  largest {human_bytes(g['largest']):>10}  {safe_text(g['where'], 70)}"
                  for g in s["groups"]]
    for o in s["ooms"][:3]:
        free = f", {human_bytes(o['device_free'])} free on the device" if isinstance(o.get("device_free"), int) else ""
        lines.append(f"out of memory in the window: {human_bytes(o['size'])} asked for{free}")
    lines.append(f"at the end: {human_bytes(s['at_end'])} live, {human_bytes(s['reserved_end'])} reserved in {s['segments']} segments")
    lines.append(f"the file opens in PyTorch's memory viewer: {VIEWER} (drag it in)")
    return lines


def _nsys(report: str, timeout: float, cancel: threading.Event | None) -> CaptureSummary:
    size = _size(report)
    if not size:
        return CaptureSummary(state="waiting", file=report or None, size=None,
                              lines=[f"nsys has not written {os.path.basename(report or '?')} yet"])
    tool = nsys_tools.find_nsys()
    if tool is None:
        return CaptureSummary(state="failed", file=report, size=size,
                              error="nsys not found here: cannot summarise the report")
    s = nsys_tools.stats(tool, report, timeout=timeout, cancel=cancel)
    lines: list[str] = []
    for title, key in (("top kernels", "cuda_gpu_kern_sum"), ("NVTX ranges", "nvtx_sum"),
                       ("top CUDA API calls", "cuda_api_sum")):
        lines.append(title + ":")
        lines += [f"  {r['time_pct']:>6}%  {r['instances']:>6}x  {safe_text(r['name'], 70)}" for r in s[key][:5]]
        if s.get(key + "_error"):
            lines.append("  " + safe_text(s[key + "_error"], 200))
        elif not s[key]:
            lines.append("  (none in this window)")
        if key == "cuda_gpu_kern_sum":
            lost = nsys_tools.kernels_lost(s)
            if lost is not None:
                lines += [f"  nsys recorded {lost[0]:,} of the {lost[1]:,} kernels launched in the window (its CUDA trace "
                          "buffers filled):", "  the shares above are of those it recorded; a window of fewer steps keeps them all"]
    return CaptureSummary(state="done", file=report, size=size, lines=lines, kernels=nsys_kernels(s["cuda_gpu_kern_sum"]))


def nsys_kernels(rows: list[dict]) -> list[KernelRow]:
    """cuda_gpu_kern_sum's rows as kernels; a function's launches summed over the rows it has
    (its instantiations among the report's top 10)."""
    out = []
    for r in rows:
        try:
            out.append(KernelRow(name=str(r["name"]), calls=int(str(r["instances"]).replace(",", "")),
                                 ms=float(str(r.get("total_ns") or 0).replace(",", "")) / 1e6))
        except (KeyError, ValueError):
            continue
    per_function: dict[str, int] = {}
    for k in out:
        per_function[function_name(k.name)] = per_function.get(function_name(k.name), 0) + k.calls
    return [replace(k, function_calls=per_function[function_name(k.name)]) for k in out]
