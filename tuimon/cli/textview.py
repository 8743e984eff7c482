"""A plain-text live view: one line per interval, fit for a log or a dumb terminal."""

from __future__ import annotations

import sys
import time

from ..channel import ChannelError
from ..monitor.training import TrainingView


def summary_line(s: dict) -> str:
    parts = [f"pid {s['pid']}", f"step {s['steps']}"]
    st = s["step_time_ms"]
    if st:
        parts.append(f"step {st['p50']:.1f} ms p50 / {st['p95']:.1f} p95 / {st['p99']:.1f} p99")
    if s["steps_per_s"]:
        parts.append(f"{s['steps_per_s']:.2f} steps/s")
    for name, per_s in list(s["throughput_per_s"].items())[:2]:
        parts.append(f"{per_s:,.0f} {name}/s")
    if s["data_wait_share"] is not None:
        parts.append(f"data wait {s['data_wait_share']:.0%}")
    top = [r for r in s["ranges"] if r["depth"] == 0][:3]
    if top:
        parts.append("ranges " + ", ".join(f"{r['name']} {r['share']:.0%}" for r in top))
    if s["dropped"] or s["corrupt"]:
        parts.append(f"dropped {s['dropped']} corrupt {s['corrupt']}")
    if s["state"] != "alive":
        parts.append(f"[process {s['state']}]")
    return " | ".join(parts)


def follow(view: TrainingView, interval: float, until=None, out=sys.stdout) -> dict:
    """Print a line each interval until `until()` is true or the process is gone; returns the
    last snapshot (the last look at a process that ended)."""
    snap = {}
    try:
        while True:
            view.poll()
            snap = view.snapshot()
            print(summary_line(snap), file=out, flush=True)
            if snap["state"] != "alive" or (until and until()):
                view.poll()
                return view.snapshot()
            time.sleep(interval)
    except ChannelError as e:
        print(f"tuimon: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        pass
    return snap
