"""`tuimon attach PID` with a timeline of its start and the CPU of each of its parts: where the
first frame and the steady state go (docs/measurements.md, the sixth code-review session).

    python benchmarks/attach_timeline.py PID OUT.json        # in a terminal (or a pty: monitor_cost.Term)
    TRACEMALLOC=1 python benchmarks/attach_timeline.py ...   # + the Python memory that grew 10 s -> 40 s

OUT is rewritten every 0.25 s (stop the monitor at any time): "events", the first calls of the sampler's
and the UI's parts (start and end in CLOCK_MONOTONIC s, the thread, RSS MiB at the end) and the imports
of the modules they live in, beginning with the process's own start; "total": each part's calls, wall
time and thread CPU time over every call. The parts are wrapped as their modules load (an import hook),
so the start keeps its order: nothing is imported earlier than tuimon itself imports it.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time

now = time.monotonic
EVENTS: list[dict] = []
TOTAL: dict[str, list] = {}  # label -> [calls, wall s, thread CPU s]
CALLS: dict[str, int] = {}
MALLOC: dict = {}


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def event(name: str, t0: float | None = None, t1: float | None = None) -> None:
    EVENTS.append({"name": name, "t0": now() if t0 is None else t0, "t1": t1,
                   "thread": threading.current_thread().name, "rss": round(rss_mib(), 1)})


def process_start() -> float:
    """When this process started, on the monotonic clock (the kernel's start time is in ticks since boot)."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    return ticks / os.sysconf("SC_CLK_TCK") - (time.clock_gettime(time.CLOCK_BOOTTIME) - now())


def wrap(owner, attr: str, label: str, first: int = 3) -> None:
    """Time every call of owner.attr; its first `first` calls are events too."""
    fn = getattr(owner, attr)

    @functools.wraps(fn)
    def timed(*a, **k):
        n = CALLS[label] = CALLS.get(label, 0) + 1
        t0, c0 = now(), time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            total = TOTAL.setdefault(label, [0, 0.0, 0.0])
            total[0] += 1
            total[1] += now() - t0
            total[2] += time.thread_time() - c0
            if n <= first:
                event(f"{label}#{n}", t0, now())
    setattr(owner, attr, timed)


PARTS = {
    "tuimon.monitor.session": lambda m: (wrap(m.LiveSession, "poll", "poll"), wrap(m, "host_sample", "host")),
    "tuimon.monitor.channel_finder": lambda m: wrap(m.ChannelFinder, "view", "channel lookup", 0),
    "tuimon.monitor.captures": lambda m: wrap(m.Captures, "status", "capture status", 0),
    "tuimon.monitor.outside": lambda m: wrap(m.OutsideWatch, "lines", "outside", 0),
    "tuimon.sources.nvml": lambda m: (wrap(m.DeviceSampler, "__init__", "nvml init", 1),
                                      wrap(m.DeviceSampler, "sample", "nvml sample")),
    "tuimon.sources.process": lambda m: wrap(m.ProcessSampler, "sample", "procs"),
    "tuimon.monitor.training": lambda m: (wrap(m.TrainingView, "poll", "channel poll"),
                                          wrap(m.TrainingView, "snapshot", "snapshot")),
    "tuimon.monitor.state": lambda m: (wrap(m.MonitorState, "apply", "state.apply"),
                                       wrap(m.MonitorState, "view", "state.view")),
    "tuimon.ui.app": lambda m: (wrap(m.TuimonApp, "on_mount", "app.on_mount", 1),
                                wrap(m.TuimonApp, "redraw", "redraw"), wrap(m.TuimonApp, "apply_cycle", "apply_cycle")),
    "tuimon.ui.screens.main": lambda m: (wrap(m.MainScreen, "compose", "screen.compose", 1),
                                         wrap(m.MainScreen, "show_view", "show_view", 0),
                                         wrap(m.MainScreen, "on_mount", "screen.on_mount", 1)),
    "textual.app": lambda m: wrap(m.App, "_display", "textual _display", 4),
    "textual.screen": lambda m: wrap(m.Screen, "_on_timer_update", "compositor refresh", 0),
    "textual.drivers.linux_driver": lambda m: wrap(m.LinuxDriver, "write", "driver.write", 4),
}
IMPORTS = set(PARTS) | {"tuimon.cli.main"}


class WrapOnImport(importlib.abc.MetaPathFinder):
    """Times the import of the modules in IMPORTS and wraps their parts once they have loaded."""

    def find_spec(self, name, path, target=None):
        if name not in IMPORTS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def run(module):
            t0 = now()
            exec_module(module)
            event(f"import {name}", t0, now())
            if name in PARTS:
                PARTS[name](module)
        spec.loader.exec_module = run  # type: ignore[method-assign]
        return spec


def grew() -> None:
    """With TRACEMALLOC=1: the Python allocations that grew from 10 s to 40 s after the start, by line."""
    import tracemalloc

    time.sleep(10)
    a = tracemalloc.take_snapshot()
    MALLOC["at10"] = tracemalloc.get_traced_memory()[0]
    time.sleep(30)
    b = tracemalloc.take_snapshot()
    MALLOC["at40"] = tracemalloc.get_traced_memory()[0]
    MALLOC["growth"] = [(str(d.traceback), d.size_diff, d.count_diff) for d in b.compare_to(a, "lineno")[:25]]
    MALLOC["top"] = [(str(d.traceback), d.size, d.count) for d in b.statistics("lineno")[:25]]


def keep_writing(path: str) -> None:
    while True:
        time.sleep(0.25)
        try:  # (json.dumps: its C encoder copies each dict before walking it; the parts add labels meanwhile)
            text = json.dumps({"events": EVENTS, "total": TOTAL, "modules": len(sys.modules),
                               "cpu": time.process_time(), "now": now(), "malloc": MALLOC})
            with open(path + ".tmp", "w") as f:
                f.write(text)
            os.replace(path + ".tmp", path)
        except Exception:  # noqa: BLE001 - a dict changed while read, a full disk: the next turn writes it
            pass


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    pid, out = sys.argv[1], sys.argv[2]
    event("process start", process_start())
    event("this script runs")
    sys.meta_path.insert(0, WrapOnImport())
    if os.environ.get("TRACEMALLOC") == "1":
        import tracemalloc

        tracemalloc.start(1)
        threading.Thread(target=grew, daemon=True, name="timeline-malloc").start()
    threading.Thread(target=keep_writing, args=(out,), daemon=True, name="timeline-writer").start()
    from tuimon.cli.main import main as tuimon_main

    return tuimon_main(["attach", pid])


if __name__ == "__main__":
    sys.exit(main())
