"""What a torch.profiler Chrome trace (gzip, or plain JSON as Kineto's on-demand traces are) holds: top kernels by device time, top operators by
self time on the host, and kernel totals. Streams the file event by event, so a trace of hundreds
of MB never sits in memory whole; run as a child process by the monitor:

    python -m tuimon.capture.trace_summary TRACE.json[.gz] [--top 5]   -> JSON on stdout
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Iterator

from .ncu import function_name

CHUNK = 1 << 20
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def trace_events(path: str) -> Iterator[dict]:
    """The objects of the trace's "traceEvents" array, one at a time."""
    decoder = json.JSONDecoder()
    with open(path, "rb") as raw:
        zipped = raw.read(2) == b"\x1f\x8b"
    opened = gzip.open(path, "rt", encoding="utf-8", errors="replace") if zipped else \
        open(path, encoding="utf-8", errors="replace")  # noqa: SIM115
    with opened as f:
        buf, pos = "", 0

        def more() -> bool:
            nonlocal buf, pos
            chunk = f.read(CHUNK)
            buf, pos = buf[pos:] + chunk, 0
            return bool(chunk)

        while True:  # find the array
            k = buf.find('"traceEvents"', pos)
            if k >= 0:
                b = buf.find("[", k)
                if b >= 0:
                    pos = b + 1
                    break
            if not more():
                raise ValueError("no traceEvents in the trace")
        while True:
            while True:  # skip separators
                while pos < len(buf) and buf[pos] in " \t\r\n,":
                    pos += 1
                if pos < len(buf) or not more():
                    break
            if pos >= len(buf):
                raise ValueError("the trace ends inside traceEvents")
            if buf[pos] == "]":
                return
            while True:
                try:
                    event, end = decoder.raw_decode(buf, pos)
                    break
                except json.JSONDecodeError as e:
                    if len(buf) - e.pos > 1 << 16 or not more():  # bad JSON, not just a cut chunk
                        raise ValueError(f"the trace is not valid JSON near byte {e.pos}") from None
            pos = end
            if isinstance(event, dict):
                yield event


def summarize(path: str, top: int = 5) -> dict:
    device: dict[str, list] = {}
    kernel_names: dict[str, list] = {}  # cat "kernel" only: name -> [calls, us]
    kernels, kernel_us = 0, 0.0
    ops: dict[tuple, list] = {}  # (pid, tid) -> [(ts, end, name)]
    for e in trace_events(path):
        if e.get("ph") != "X" or not isinstance(e.get("dur"), (int, float)) or not isinstance(e.get("ts"), (int, float)):
            continue
        cat, name, dur = e.get("cat"), str(e.get("name", "?")), float(e["dur"])
        if cat in DEVICE_CATS:
            row = device.setdefault(name, [0, 0.0])
            row[0] += 1
            row[1] += dur
            if cat == "kernel":
                kernels += 1
                kernel_us += dur
                row = kernel_names.setdefault(name, [0, 0.0])
                row[0] += 1
                row[1] += dur
        elif cat == "cpu_op":
            ops.setdefault((e.get("pid"), e.get("tid")), []).append((float(e["ts"]), float(e["ts"]) + dur, name))
    host = _self_times(ops)

    def rows(table: dict[str, list]) -> list[dict]:
        ranked = sorted(table.items(), key=lambda kv: -kv[1][1])[:top]
        return [{"name": k, "calls": c, "ms": round(us / 1e3, 3)} for k, (c, us) in ranked]

    per_function: dict[str, int] = {}
    for name, (calls, _us) in kernel_names.items():
        fn = function_name(name)
        per_function[fn] = per_function.get(fn, 0) + calls
    top_kernels = [dict(r, function_calls=per_function.get(function_name(r["name"]), r["calls"]))
                   for r in rows(kernel_names)]
    return {"top_device": rows(device), "top_host_self": rows(host), "kernels": kernels,
            "kernel_ms": round(kernel_us / 1e3, 3), "top_kernels": top_kernels}


def _self_times(ops: dict[tuple, list]) -> dict[str, list]:
    """Per operator name: calls and self time (its time minus that of the operators it called),
    so an op nested in itself (aten::linear > aten::addmm ...) is not counted at every level."""
    out: dict[str, list] = {}
    for events in ops.values():
        events.sort(key=lambda x: (x[0], -x[1]))
        stack: list[list] = []  # [end, name, child time]
        for ts, end, name in events:
            while stack and stack[-1][0] <= ts:
                _close(stack.pop(), out)
            if stack:
                stack[-1][2] += end - ts
            stack.append([end, name, 0.0, end - ts])
        while stack:
            _close(stack.pop(), out)
    return out


def _close(frame: list, out: dict) -> None:
    end, name, children, total = frame
    row = out.setdefault(name, [0, 0.0])
    row[0] += 1
    row[1] += max(0.0, total - children)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=5)
    a = ap.parse_args(argv)
    try:
        print(json.dumps(summarize(a.trace, a.top)))
    except (OSError, ValueError, EOFError) as e:
        print(f"cannot read the trace: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
