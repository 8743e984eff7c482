"""`tuimon record PID`: sample the GPUs, the process tree and the channel into a recording."""

from __future__ import annotations

import sys
import threading

from ..channel import ChannelError
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
        print(f"tuimon: recording without the channel: {e}", file=sys.stderr)
        view = None
    procs = ProcessSampler(pid)
    gpus = DeviceSampler()
    if gpus.error:
        print(f"tuimon: recording without GPU metrics: {gpus.error}", file=sys.stderr)
    rec = Recorder(path, note)
    done = threading.Event()

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
        for source, data in entries:
            rec.record(source, data)

    poller = Poller(poll, write, interval).start()
    try:
        done.wait(seconds if seconds > 0 else None)
    except KeyboardInterrupt:
        pass
    poller.stop()
    rec.close()
    gpus.close()
    print(f"recorded {poller.cycles} cycles to {path}")
    return 0
