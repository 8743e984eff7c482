"""`tuimon capture PID`: a capture window asked for from a script, and what it found."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from ..analysis import stall
from ..capture import backends, kineto_ranks, kineto_windows, nsys_session
from ..capture.client import MEMORY_STEPS, CaptureRefused, window_steps
from ..capture.cost import StepLog, describe, expected_pause, window_cost
from ..capture.ncu import with_ncu_commands
from ..capture.summary import summarize
from ..channel import ChannelError
from ..channel.control import KIND_MEMORY
from ..channel.text import count, safe_text
from ..model import CaptureStatus, WindowCost, to_json
from ..monitor.ranks import job_root
from ..monitor.target import open_channel

if TYPE_CHECKING:
    import argparse
    from typing import TextIO

    from ..channel.reader import SegmentReader

INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
COST_WAIT_S = 15.0  # after a window: for the steps just past its end, whose times tell its cost


def cmd_capture(args: argparse.Namespace) -> int:
    reader = client = seq = st = rank_channels = None
    pid = args.pid
    if args.json and not args.wait:
        print("tuimon: --json goes with --wait (the result is there only once the window is done)", file=sys.stderr)
        return 2
    out = sys.stderr if args.json else sys.stdout  # (--json: standard output holds the JSON alone)
    try:
        reader, why = open_channel(args.pid)
        info, steps_seen = reader.info, reader.steps
        pid = info.pid
        if why:
            print(f"tuimon: {why}", file=sys.stderr)
        log = StepLog()  # the job's steps, from as far back as its ring holds: what a window costs it
        reader.seek_recent(info.ring_records)

        def drain() -> None:
            try:
                log.add(reader.drain().records)
            except ChannelError:
                pass  # (the job went away: the wait says so)

        drain()
        memory = getattr(args, "memory", False)  # (the allocator's history: the probe's window in any job)
        steps, seconds = args.steps, args.seconds
        if steps is None and seconds is None:  # as `c` does: steps if the loop has them, else 10 s
            steps, seconds = ((MEMORY_STEPS if memory else 10), None) if steps_seen else (None, 10.0)
        if steps is not None and (why := no_steps_coming(reader, log)):
            print(f"tuimon: PID {info.pid} {why}: a window of {count(steps, 'step')} opens at its next step and "
                  "would wait for it; --seconds 10 takes a time window", file=sys.stderr)
            return 2
        now = reader.now()
        root = job_root(args.pid, reader)  # (a torchrun job: its launcher, or a rank's agent)
        if root is not None:
            rank_channels = kineto_ranks.RankChannels(root)  # (Kineto's window is then taken on every rank)
        client = backends.choose(info, lambda: reader.steps, backends.Ask(steps, seconds, memory),
                                 now.source if now is not None else None,
                                 say=lambda s: print(f"  ({s})", file=out, flush=True),
                                 ranks=rank_channels.ranks if rank_channels is not None else None)
        kind = backends.kind_of(client, memory, safe_text(info.meta.capture_kind, 40))
        before = client.status()  # the job's last window, whose cost tells what the next one will cost
        seq = client.request(steps=steps, seconds=seconds, kind=KIND_MEMORY if memory else 0)
        what = f"{seconds:g} s" if seconds is not None else count(steps, "step")
        if seconds is not None and args.seconds is None:
            what += " (no steps seen yet)"
        print(f"asked PID {info.pid} for {'an' if kind == 'nsys' else 'a'} {kind} capture of {what} (request {seq})",
              file=out, flush=True)
        last_cost = window_cost(log.steps, before.first_step, before.last_step, before.updated_ns) \
            if before.state == "done" and before.kind == kind and steps else None
        if last_cost is not None and (note := expected_pause(last_cost, steps)):
            print(f"  ({note})", file=out, flush=True)
        session = backends.runs_here(client)
        if session:
            note = kineto_windows.COST_NOTE if kind == kineto_windows.KIND else nsys_session.COST_NOTE
            print(f"  ({note})", file=out, flush=True)
        if not args.wait and not session:
            return 0  # (the probe runs the window; an nsys session's window is run from here: it waits)
        st = client.wait(seq, args.timeout, on_change=lambda s: print("  " + progress_line(s), file=out, flush=True),
                         on_poll=drain)
        if (unfinished := _unfinished(st, kind, session, seq, args.timeout, pid)) is not None:
            print(f"tuimon: {unfinished}", file=sys.stderr)
            return 1
        return _report(st, kind, session, args, out, lambda: _cost(st, log, drain, reader),
                       ncu_for=(pid, [str(a) for a in info.meta.argv] or _cmdline(pid)),
                       rank_traces=client.files if isinstance(client, kineto_ranks.KinetoRankWindows) else None)
    except (ChannelError, CaptureRefused) as e:
        print(f"tuimon: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # what --timeout says: the window is the job's, not this command's
        print(f"tuimon: {_interrupted(seq, st, client, pid)}", file=sys.stderr)
        return INTERRUPTED
    finally:
        if client is not None and backends.runs_here(client):
            client.close()  # (a window cut short by --timeout or Ctrl-C: nsys still writes its report)
        if reader is not None:
            reader.close()
        if rank_channels is not None:
            rank_channels.close()


def _interrupted(seq: int | None, st: CaptureStatus | None, client: object, pid: int) -> str:
    """What Ctrl-C left of the window, in words."""
    if seq is None:
        return "interrupted before a capture was asked for"
    if st is not None and not st.busy:
        return f"interrupted; capture {seq} ended ({st.state}): {safe_text(st.path or st.message, 1000)}"
    if isinstance(client, nsys_session.SessionWindows):
        return f"interrupted: stopping nsys window {seq} (nsys still writes its report)"
    return f"interrupted; capture {seq} goes on in the job (follow it in `tuimon attach {pid}`, l lists the captures)"


def _unfinished(st: CaptureStatus, kind: str, session: bool, seq: int, timeout: float, pid: int) -> str | None:
    """Why the window did not end done within timeout, in words; None when it did."""
    if st.busy and kind == kineto_windows.KIND:
        return (f"Kineto window {seq} is still {st.state} after {timeout:g} s (Kineto goes on with it in the job, if "
                "it took the config)")
    if st.busy and session:
        return f"nsys window {seq} is still {st.state} after {timeout:g} s: stopping it (nsys still writes its report)"
    if st.busy:
        return (f"capture {seq} is still {st.state} after {timeout:g} s; it goes on in the job (follow it in `tuimon "
                f"attach {pid}`, l lists the captures)")
    if st.state != "done":
        return f"capture {seq} failed: {safe_text(st.message, 300)}"
    return None


def _report(st: CaptureStatus, kind: str, session: bool, args: argparse.Namespace, out: TextIO,
            cost_of: Callable[[], WindowCost | None], ncu_for: tuple[int, list[str]],
            rank_traces: dict[int, str] | None = None) -> int:
    """A window done: its cost to the job, then its summary (or where nsys will write its report) and
    the ncu commands of its top kernels (ncu_for: the job's pid and command line); rank_traces: a
    window on every rank's traces by rank (the summary is of st.path, the lowest rank's)."""
    cost = cost_of()
    st = replace(st, cost=cost)
    covered = window_steps(st.state, st.first_step, st.last_step)
    print("  cost: " + (describe(cost) if cost is not None else "not known (the job's steps just past the "
                        "window did not come in time)" if covered else "not known (the window covered no step: "
                        "a window's cost is read from the job's step times)"), file=out, flush=True)
    if kind == "nsys" and not session and not _wait_for_report(st.path, min(args.timeout, 15)):
        print(safe_text(st.path, 1000), file=out)
        print("nsys writes the report when the job exits; then: nsys stats --report nvtx_sum <report>", file=out)
        if args.json:
            print(json.dumps(to_json(st)))
        return 0
    result = with_ncu_commands(summarize(st), st, *ncu_for)
    if rank_traces:
        print(f"every rank's trace ({count(len(rank_traces), 'rank')}; the summary below is the first's):", file=out)
        for rank, path in rank_traces.items():
            print(f"  rank {rank}: {safe_text(path, 1000)}", file=out)
    print(safe_text(result.file or "", 1000), file=out)
    if result.error:
        print(f"tuimon: {result.error}", file=sys.stderr)
    for line in result.lines:
        print(line, file=out)
    if result.ncu_commands:
        print("one launch of each top kernel in Nsight Compute (a new run of the job; capture/ncu.py says which):",
              file=out)
        for c in result.ncu_commands:
            print("  " + safe_text(c, 4000), file=out)
    if args.json:
        extra = {"rank_traces": {str(k): v for k, v in rank_traces.items()}} if rank_traces else {}
        print(json.dumps(dict(to_json(replace(st, summary=result)), ncu_commands=result.ncu_commands, **extra)))
    return 0 if result.state == "done" else 1


def no_steps_coming(reader: SegmentReader, log: StepLog) -> str | None:
    """Why a window of steps would wait for good, in words: the probe has seen nothing that marks
    a step (no step source: no optimizer.step(), tuimon.step(), backward(), model call or DataLoader
    batch), or the loop has made no step for longer than the stall bar (analysis/stall.py: 5x its
    longest step, at least 20 s); None while steps come, or the first one is under way."""
    now = reader.now()
    if reader.steps == 0 and (now is None or now.source == "none"):
        return ("has counted no steps (its probe saw no optimizer.step(), tuimon.step(), backward(), model call "
                "or DataLoader batch)")
    last_ns = reader.heartbeat_ns if reader.steps else (now.step_t0_ns if now is not None else 0)
    if not last_ns:
        return None
    longest_ms = max([(now.longest_ns if now is not None else 0) / 1e6] +
                     [(t1 - t0) / 1e6 for _, t0, t1 in log.steps])
    quiet_s, bar = (time.monotonic_ns() - last_ns) / 1e9, stall.limit_s(longest_ms)
    if quiet_s <= bar:
        return None
    return (f"has made no step for {quiet_s:,.0f} s (the stall bar: {bar:,.0f} s)" if reader.steps else
            f"has been in its first step for {quiet_s:,.0f} s (the stall bar: {bar:,.0f} s)")


def _cost(st: CaptureStatus, log: StepLog, drain: Callable[[], None], reader: SegmentReader) -> WindowCost | None:
    """What the done window cost the job, from its step times (waits for the steps just past its
    end, COST_WAIT_S at most, or less when the job stops). A window that covered no step (a time
    window over a loop without steps) has no cost to find: none is waited for."""
    if not 1 <= st.first_step <= st.last_step:
        return None
    end = time.monotonic() + COST_WAIT_S
    while True:
        drain()
        cost = window_cost(log.steps, st.first_step, st.last_step, st.updated_ns)
        if cost is not None or time.monotonic() >= end or reader.process_state() != "alive":
            return cost
        time.sleep(0.1)


def progress_line(st: CaptureStatus) -> str:
    """'capturing: steps 12..15'; the probe's message when it says more than the state."""
    steps = window_steps(st.state, st.first_step, st.last_step)
    message = safe_text(st.message, 200)
    parts = [f"{st.state}:", steps, message if message != st.state else ""]
    return " ".join(p for p in parts if p)


def _cmdline(pid: int) -> list[str]:
    """The job's command line from /proc (a channel whose header holds no argv)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _wait_for_report(report: str, timeout: float) -> bool:
    """Whether the report is there and complete (non-empty, size steady) within timeout."""
    end = time.monotonic() + timeout
    last_size = -1
    while time.monotonic() < end:
        size = os.path.getsize(report) if os.path.exists(report) else 0
        if size and size == last_size:
            return True
        last_size = size
        time.sleep(1.0)
    return False
