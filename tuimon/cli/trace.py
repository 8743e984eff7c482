"""`tuimon trace`: a job's steps and phases as a Chrome/Perfetto trace (JSON): what a live job's
channels' rings still hold (seconds to minutes: as many steps as 65,536 records make), or a
recording (tuimon record). monitor/timeline.py says what
each source gives."""

from __future__ import annotations

import gzip
import json
import sys
from typing import TYPE_CHECKING

from ..channel import ChannelError
from ..channel.text import safe_text
from ..monitor.chrome_trace import chrome_trace
from ..monitor.timeline import Timeline, from_live, from_recording
from ..sources.recording import RecordingError
from . import output

if TYPE_CHECKING:
    import argparse


def cmd_trace(args: argparse.Namespace) -> int:
    if (args.pid is None) == (args.recording is None):
        print("tuimon: trace a live job (PID) or a recording (--recording FILE): one of them", file=sys.stderr)
        return 2
    try:
        output.check(args.output, args.force)  # (refused before the job's rings are read)
    except output.OutputError as e:
        print(f"tuimon: {e}", file=sys.stderr)
        return 2
    try:
        tl = from_recording(args.recording) if args.recording else from_live(args.pid, args.minutes * 60)
    except (ChannelError, RecordingError) as e:
        print(f"tuimon: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"tuimon: cannot read {args.recording}: {e.strerror or e}", file=sys.stderr)
        return 2
    if not any(p.steps for p in tl.processes):
        print(f"tuimon: no steps in {tl.source}" + (f" ({'; '.join(tl.notes)})" if tl.notes else ""), file=sys.stderr)
        return 1
    try:
        write(chrome_trace(tl), args.output, args.force)
    except output.OutputError as e:
        print(f"tuimon: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise  # (the reader of standard output left: main() ends quietly)
    except OSError as e:
        print(f"tuimon: cannot write {args.output}: {e.strerror or e}", file=sys.stderr)
        return 1
    say = output.words_to(args.output)
    print(describe(tl, args.output), file=say)
    for note in tl.notes:
        print("  " + safe_text(note, 300), file=say)
    return 0


def write(trace: dict, path: str, force: bool = False) -> None:
    """JSON (gzip when the name ends in .gz); '-': standard output. Where it goes: cli/output.py."""
    if path == output.STDOUT:
        json.dump(trace, sys.stdout, separators=(",", ":"))
        sys.stdout.write("\n")
        return
    gz = path.endswith(".gz")
    with output.opened(path, force, binary=gz) as f:
        if gz:
            with gzip.open(f, "wt", encoding="utf-8") as z:  # (closes its gzip stream, not f)
                json.dump(trace, z, separators=(",", ":"))
        else:
            json.dump(trace, f, separators=(",", ":"))


def describe(tl: Timeline, path: str) -> str:
    """'wrote t.json: ranks 0, 1; 2,468 steps over 8.2 s; 4 GPU counter tracks (open it in Perfetto: ...)'."""
    who = [f"rank {p.rank}" if p.rank is not None else f"PID {p.pid}" for p in tl.processes if p.steps]
    steps = sum(len(p.steps) for p in tl.processes)
    lo, hi = tl.span_ns() or (0, 0)  # (called with steps: cmd_trace says so otherwise)
    parts = [", ".join(who), f"{steps:,} steps over {(hi - lo) / 1e9:.1f} s"]
    if tl.counters:
        parts.append(f"{len(tl.counters)} GPU counter track{'s' if len(tl.counters) != 1 else ''}")
    where = "standard output" if path == "-" else path
    return f"wrote {where}: {'; '.join(parts)} (open it in Perfetto, ui.perfetto.dev, or chrome://tracing)"
