"""What a memory window's snapshot holds: the peak of live allocations over the window and the
largest of them at that peak, by the Python line that made them. Run as a child process
(`python -m tuimon.capture.memory_summary SNAPSHOT`, printing JSON) so a large snapshot never
holds the monitor: capture/summary.py calls it.

The snapshot is the pickled dict torch.cuda.memory._snapshot() returns (torch/cuda/memory.py
documents it): `segments` (the allocator's segments at the window's end, each with its blocks:
size, state, the frames of the allocation that made them) and `device_traces` (a list per device
of the allocator's events over the window: alloc, free_requested, free_completed, segment_alloc,
segment_free, oom, each with addr, size and, for an alloc, its frames, innermost first). It is
read with the standard library alone (the monitor never imports torch), by an unpickler that
refuses every class: a snapshot is plain dicts, lists, strings and numbers, and a file that holds
anything else is not run.

Live at a moment = what was live when the window opened (blocks freed during it that it never saw
allocated, and blocks still live at its end that it never saw allocated) plus the window's own
allocations not yet freed. A block counts as freed at free_completed (its memory reusable)."""

from __future__ import annotations

import json
import os
import pickle
import re
import sys
from typing import NoReturn

MAX_BYTES = 1 << 30  # snapshots read at most (a window keeps 100,000 events: tens of MB)
TOP = 8
BEFORE = "allocated before the window"  # blocks whose allocation the window did not see
NO_STACK = "no Python stack (backward on autograd's thread, or C++)"  # an allocation in it without frames
_LIBRARY = re.compile(r"[/\\](torch|tuimon)[/\\]|^<|[/\\]lib[/\\]python3[.\d]*[/\\](?!site-packages|dist-packages)")


class NotASnapshot(ValueError):
    """The file is not a snapshot this reader can trust: said in words."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> NoReturn:
        raise NotASnapshot(f"the file holds an object of {module}.{name}: a memory snapshot is plain dicts and "
                           "lists, so it is not read")


def load(path: str, max_bytes: int = MAX_BYTES) -> dict:
    size = os.path.getsize(path)
    if size > max_bytes:
        raise NotASnapshot(f"{size / 2**20:,.0f} MiB is more than the {max_bytes / 2**20:,.0f} MiB read at most")
    with open(path, "rb") as f:
        try:
            data = _PlainUnpickler(f).load()
        except NotASnapshot:
            raise
        except Exception as e:  # noqa: BLE001 - a truncated or foreign file: said in words
            raise NotASnapshot(f"not a pickle: {type(e).__name__}: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("segments"), list) \
            or not isinstance(data.get("device_traces"), list):
        raise NotASnapshot("not a memory snapshot (no segments and device_traces)")
    return data


def frame_text(f: object) -> str:
    if not isinstance(f, dict):
        return "?"
    return f"{os.path.basename(str(f.get('filename', '?')))}:{f.get('line', '?')} in {f.get('name', '?')}"


def where(frames: object, none: str = NO_STACK) -> str:
    """The line that made an allocation: its innermost frame outside torch, tuimon and the standard
    library (the job's code, or a library's model code such as transformers'), else its innermost;
    `none` without frames."""
    if not isinstance(frames, list) or not frames:
        return none
    own = next((f for f in frames if isinstance(f, dict) and not _LIBRARY.search(str(f.get("filename", "")))), None)
    return frame_text(own if own is not None else frames[0])


def _stack(frames: object, depth: int = 4) -> list[str]:
    """The allocating line and the job's frames around it, innermost first."""
    if not isinstance(frames, list):
        return []
    own = [f for f in frames if isinstance(f, dict) and not _LIBRARY.search(str(f.get("filename", "")))]
    return [frame_text(f) for f in (own or frames)[:depth]]


def _events(snapshot: dict) -> tuple[int, list[dict]]:
    """The device with the most events, and its events (the well-formed ones)."""
    traces = snapshot["device_traces"]
    best = max(range(len(traces)), key=lambda i: len(traces[i]) if isinstance(traces[i], list) else -1, default=0)
    events = traces[best] if traces and isinstance(traces[best], list) else []
    return best, [e for e in events if isinstance(e, dict) and isinstance(e.get("size"), int)]


def summarize(snapshot: dict, top: int = TOP) -> dict:
    device, events = _events(snapshot)
    release = "free_completed" if any(e.get("action") == "free_completed" for e in events) else "free_requested"
    # What the window allocated and is still live at its end; what it freed without seeing it made.
    live: dict = {}
    freed_before: dict[int, tuple[int, str, list]] = {}  # event index -> (size, where, stack)
    for i, e in enumerate(events):
        action, addr = e.get("action"), e.get("addr")
        if action == "alloc":
            live[addr] = i
        elif action == release:
            if live.pop(addr, None) is None:
                freed_before[i] = (e["size"], BEFORE, [])
    blocks = [b for s in snapshot["segments"] if isinstance(s, dict) and s.get("device", device) == device
              for b in s.get("blocks", []) if isinstance(b, dict)]
    still_before = [(b.get("size", 0), where(b.get("frames"), BEFORE), _stack(b.get("frames"))) for b in blocks
                    if str(b.get("state", "")).startswith("active") and b.get("address") not in live]
    at_start = sum(s for s, _, _ in still_before) + sum(s for s, _, _ in freed_before.values())
    # The peak, replaying the window's events from what was live when it opened.
    total = peak = at_start
    peak_at = -1
    made: dict = {}
    for i, e in enumerate(events):
        action, addr = e.get("action"), e.get("addr")
        if action == "alloc":
            made[addr] = e["size"]
            total += e["size"]
            if total >= peak:  # (a tie goes to the later: steps repeat their peak, and the window's are named)
                peak, peak_at = total, i
        elif action == release:
            size = made.pop(addr, None)
            if size is not None:
                total -= size
            elif i in freed_before:
                total -= freed_before[i][0]
    # What was live at the peak: the window's allocations not yet freed, and what it began with.
    at_peak: dict = {}
    for e in events[:peak_at + 1]:
        action, addr = e.get("action"), e.get("addr")
        if action == "alloc":
            at_peak[addr] = e
        elif action == release:
            at_peak.pop(addr, None)
    allocs = [(e["size"], where(e.get("frames")), _stack(e.get("frames"))) for e in at_peak.values()] + \
        still_before + [v for i, v in freed_before.items() if i > peak_at]
    groups: dict[str, dict] = {}
    for size, at, stack in allocs:
        g = groups.setdefault(at, {"where": at, "bytes": 0, "count": 0, "largest": 0, "stack": stack})
        g["bytes"] += size
        g["count"] += 1
        g["largest"] = max(g["largest"], size)
    segments = [s for s in snapshot["segments"] if isinstance(s, dict) and s.get("device", device) == device]
    return {
        "device": device,
        "events": len(events),
        "allocs": sum(1 for e in events if e.get("action") == "alloc"),
        "peak": peak,
        "peak_at": peak_at,
        "at_start": at_start,
        "at_end": sum(b.get("size", 0) for b in blocks if str(b.get("state", "")).startswith("active")),
        "reserved_end": sum(s.get("total_size", 0) for s in segments if isinstance(s.get("total_size"), int)),
        "segments": len(segments),
        "groups": sorted(groups.values(), key=lambda g: -g["bytes"])[:top],
        "largest": [{"size": s, "where": w} for s, w, _ in sorted(allocs, key=lambda a: -a[0])[:top]],
        "ooms": [{"size": e["size"], "device_free": e.get("device_free")} for e in events if e.get("action") == "oom"],
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tuimon.capture.memory_summary SNAPSHOT", file=sys.stderr)
        return 2
    try:
        print(json.dumps(summarize(load(argv[0]))))
    except (OSError, NotASnapshot) as e:
        print(f"{argv[0]}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
