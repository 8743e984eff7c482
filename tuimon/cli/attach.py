"""`tuimon attach`, `top`, `replay` and `ls`: the monitor on a running process, on all GPUs, on a
recording, and which processes have a channel."""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..channel import ChannelError, list_segments, procinfo
from ..channel.discovery import segment_state
from ..channel.reader import SegmentReader
from ..channel.text import safe_text
from ..model import NA, Baseline, Cycle, to_json
from ..monitor.report import view_json
from ..monitor.session import LiveSession, ReplaySession
from ..monitor.state import MonitorState, View
from ..monitor.target import open_channel
from ..sources import pyspy
from ..sources.nvml import DeviceSampler
from ..sources.recording import Recording, RecordingError
from . import textview
from .tui import no_screen, tui

if TYPE_CHECKING:
    import argparse

    from ..sources.gpu_python import GpuPython

ONCE_MIN_WINDOW_S = 0.5  # CPU % and GPM activity are rates: they need two samples this far apart
OUTSIDE_POLL_S = 0.2  # `--once` on a process without the probe: how often to look whether its lines came
REGRESSED = 3  # `attach --once --baseline`'s exit status when the job is measurably slower, or stalled or
# ended other than cleanly (2: bad input)


def cmd_attach(args: argparse.Namespace) -> int:
    if args.inject:
        from .inject import load

        if load(args.pid, 15.0) != 0:
            return 2
    if procinfo.start_ticks(args.pid) is None:  # gone: only a channel it left can still be shown
        try:
            reader, _ = open_channel(args.pid)
            reader.close()
        except ChannelError as e:
            print(f"tuimon: {e}", file=sys.stderr)
            return 2
    session = LiveSession(args.pid, args.interval, gpus=args.gpus, outside=True,
                          outside_first_s=outside_round_s(args.window) if args.once else pyspy.FIRST_ROUND_S)
    if args.once:
        view = once(session, args.window, args.baseline)
        if args.json:
            print(json.dumps(view_json(view, args.pid), indent=2))
        else:
            from ..ui.plain import summary_line  # (formatting only: textual is not started)

            print(summary_line(view))
            if isinstance(view.channel, NA):
                print(f"tuimon: no channel: {safe_text(view.channel.reason, 500)}", file=sys.stderr)
            for source, why in view.problems.items():
                print(f"tuimon: {source}: {safe_text(why, 500)}", file=sys.stderr)
        c = view.baseline
        if c is not None and c.halted is not None:
            print(f"tuimon: baseline: the job makes no progress: {safe_text(c.halted, 500)}", file=sys.stderr)
        elif c is not None and c.state == "collecting":
            print(f"tuimon: baseline {c.progress}: no decision on the step time yet (a longer "
                  "--window)", file=sys.stderr)
        return REGRESSED if c is not None and c.regressed else 0
    no_tui = None if args.plain else no_screen()
    if no_tui:
        print(f"tuimon: {no_tui}: one line per interval instead (--plain); --once --json for one snapshot",
              file=sys.stderr)
        args.plain = True
    if args.plain:
        textview.follow(session, args.interval, baseline=args.baseline)
        return 0
    return tui(session, f"attached, every {args.interval:g} s", baseline=args.baseline)


def outside_round_s(window: float) -> int:
    """`--once` without the probe: py-spy's first round covers the window (whole seconds, and at
    least the screen's first round: the lines it shows first)."""
    return max(pyspy.FIRST_ROUND_S, math.ceil(window))


def once(session: LiveSession, window: float, baseline: tuple[str, Baseline] | None = None) -> View:
    """One view over `window` seconds (at least ONCE_MIN_WINDOW_S), from the cycles the TUI draws.
    A process sampled from outside (no probe): also until its first round of lines came, or py-spy
    said why not (it ends a round it cannot finish GRACE_S after its end)."""
    state = MonitorState(baseline=baseline)
    started = time.monotonic()
    end = started + max(window, ONCE_MIN_WINDOW_S)
    last_wait = started + session.outside.first_round_s + pyspy.GRACE_S + 5.0  # (py-spy hung and not yet killed)
    try:
        while True:
            c = session.poll()
            state.apply(c)
            now = time.monotonic()
            left = end - now
            if left <= 0:
                if c.outside is None or c.outside.state != "starting" or now >= last_wait:
                    break
                left = OUTSIDE_POLL_S  # (the window is over; the lines from outside are not in yet)
            time.sleep(min(left, 1.0))
    finally:
        session.stop()
    return state.view()


def cmd_top(args: argparse.Namespace) -> int:
    session = LiveSession(None, args.interval, gpus=args.gpus)
    if args.once:
        view = once(session, args.window)
        if args.json:
            print(json.dumps({"gpus": [to_json(g.latest) for g in view.gpus], "host": to_json(view.host),
                              "problems": dict(view.problems)}, indent=2))
        else:
            from ..ui.plain import top_text  # (formatting only: textual is not started)

            print(top_text(view))
        return 0
    why = no_screen()
    if why:
        print(f"tuimon: top needs a terminal that can draw a screen ({why}); `tuimon top --once` (or --once "
              "--json) prints one snapshot", file=sys.stderr)
        return 2
    return tui(session, f"top, every {args.interval:g} s", top=True)




def read_recording(path: str, on_cycle: Callable[[Cycle], object]) -> Recording | None:
    """Every cycle of a recording through on_cycle; None after saying why it cannot be read."""
    try:
        rec = Recording(path)
        for c in rec.cycles():
            on_cycle(c)
    except OSError as e:
        print(f"tuimon: cannot read {path}: {e.strerror or e}", file=sys.stderr)
        return None
    except RecordingError as e:
        print(f"tuimon: {e}", file=sys.stderr)
        return None
    return rec


def cmd_replay(args: argparse.Namespace) -> int:
    cycles: list[None] = []
    rec = read_recording(args.file, lambda c: cycles.append(None))  # (counted, not kept)
    if rec is None:
        return 2
    n = len(cycles)
    if n == 0:
        print(f"tuimon: {args.file} has no samples (a header{' and ' + str(rec.skipped) + ' unreadable lines' if rec.skipped else ' only'})",
              file=sys.stderr)
        return 2
    why = no_screen()
    if why:
        print(f"tuimon: replay needs a terminal that can draw a screen ({why})", file=sys.stderr)
        return 2
    return tui(ReplaySession(args.file, args.speed, total=n, skipped=rec.skipped), "replay", baseline=args.baseline)


def cmd_ls(args: argparse.Namespace, devices: DeviceSampler | None = None) -> int:
    """The channels of this user's processes; below them, this user's Python processes that hold a
    GPU context (NVML) and have no channel, with how to put the probe in. Without NVML, the
    channels alone (quietly: `tuimon doctor` says why NVML is missing). devices: NVML (tests)."""
    rows = list_segments()
    if not rows:
        print("no tuimon channels of yours are open")
    else:
        print(f"{'PID':>8}  {'STATE':<8}  {'RANK':<6}  {'COMMAND':<48}  JOB OUTPUT")
    probed = set()
    for pid, path in rows:
        state, rank, command, log = segment_state(path), "", "", ""
        if state != "reused":  # (a reused PID is another process: it has no channel)
            probed.add(pid)
        try:
            with SegmentReader(path) as r:
                meta = r.info.meta
                rank = "" if meta.rank is None else safe_text(f"{meta.rank}/{meta.world_size}", 6)
                command = safe_text(meta.command, 48)
                log = safe_text(meta.job_log or "", 200)
        except ChannelError as e:
            command = f"(unreadable: {safe_text(str(e), 60)})"
        print(f"{pid:>8}  {state:<8}  {rank:<6}  {command:<48}  {log}")
    unprobed = gpu_python_without_probe(probed, devices)
    if unprobed:
        print("\nyour Python processes on a GPU without the probe:")
        print(f"{'PID':>8}  {'GPU':<8}  {'COMMAND':<48}  TO PUT THE PROBE IN")
        for p in unprobed:
            gpus = safe_text(",".join(map(str, p.gpus)), 8)
            print(f"{p.pid:>8}  {gpus:<8}  {safe_text(p.command, 48):<48}  tuimon attach {p.pid} --inject")
    return 0


def gpu_python_without_probe(probed: set[int], devices: DeviceSampler | None = None) -> list[GpuPython]:
    """This user's Python processes on a GPU (NVML's compute processes) that have no channel;
    none without NVML."""
    from ..sources.gpu_python import without_probe  # (psutil: imported by ls alone)

    devices = devices or DeviceSampler()
    try:
        gpu_pids = {} if devices.error else devices.compute_pids()
    finally:
        devices.close()
    return without_probe(gpu_pids, probed) if gpu_pids else []
