"""`tuimon record PID`: sample the GPUs, the process tree and the channel into a recording."""

from __future__ import annotations

import sys
import threading

from ..channel import ChannelError, procinfo
from ..monitor.target import open_channel
from ..monitor.training import TrainingView
from ..sources.channel import ChannelSource
from ..sources.nvml import DeviceSampler
from ..sources.poller import Poller
from ..sources.process import ProcessSampler
from ..sources.recording import Recorder


def record(pid: int, path: str, seconds: float, interval: float, note: str = "") -> int:
    try:
        view = TrainingView(ChannelSource(open_channel(pid)))
    except ChannelError as e:
        if procinfo.start_ticks(pid) is None:  # no process and no channel: nothing to record
            print(f"tuimon: {e}", file=sys.stderr)
            return 2
        print(f"tuimon: recording without the channel: {e}", file=sys.stderr)
        view = None
    procs = ProcessSampler(pid)
    gpus = DeviceSampler()
    if gpus.error:
        print(f"tuimon: recording without GPU metrics: {gpus.error}", file=sys.stderr)
    try:
        rec = Recorder(path, note)
    except OSError as e:
        print(f"tuimon: cannot write {path}: {e.strerror or e}", file=sys.stderr)
        gpus.close()
        return 2
    done = threading.Event()
    failed: list[OSError] = []

    def poll():
        p = procs.sample()
        gpus.target_pids = {r["pid"] for r in p["procs"]} or {pid}
        out = [("process", p), ("gpu", gpus.sample())]
        if view is not None:
            try:
                view.poll()
                out.append(("training", view.snapshot()))
            except ChannelError as e:
                print(f"tuimon: {e}", file=sys.stderr)
        if not p["alive"]:
            done.set()
        return out

    def write(entries):
        if failed:
            return
        try:
            for source, data in entries:
                rec.record(source, data)
            rec.flush()  # a full disk shows now, not at the end
        except OSError as e:
            failed.append(e)
            done.set()

    poller = Poller(poll, write, interval).start()
    try:
        done.wait(seconds if seconds > 0 else None)
    except KeyboardInterrupt:
        pass
    poller.stop()
    try:
        rec.close()
    except OSError as e:
        failed.append(e)
    gpus.close()
    if failed:
        print(f"tuimon: recording stopped after {poller.cycles} cycles: cannot write {path}: "
              f"{failed[0].strerror or failed[0]} (what was written before is kept)", file=sys.stderr)
        return 1
    print(f"recorded {poller.cycles} cycles to {path}")
    return 0
