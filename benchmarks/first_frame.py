"""The first frame as a new user sees it (issue 42 item 9; docs/DESIGN.md budget: <= 0.5 s): the time
from spawn until a 120x40 pseudo-terminal, its output emulated by pyte, holds at least 15 non-empty
rows. Several commands, started alternately, `--starts` times each, after one uncounted start each
(it writes the bytecode and warms the page cache); a table of min / median / max per command.

    python benchmarks/first_frame.py [--starts 5] [--size 120x40] [--rows 15] [--timeout 10] \
        NAME[:rows=N]=COMMAND [NAME[:rows=N]=COMMAND ...]

    # e.g. two trees of tuimon beside nvitop, on a job of PID 1234 (each tree's own folder as the working
    # directory: `python -m` puts it first on sys.path)
    python benchmarks/first_frame.py --starts 7 \
        "before=sh -c 'cd /tmp/ff-before && exec python -m tuimon attach 1234'" \
        "after=sh -c 'cd /work/tree && exec python -m tuimon attach 1234'" \
        "nvitop=nvitop --interval 1"

    # `tuimon top` on a host of one GPU fills fewer rows (its GPU, its processes, the host, the keys):
    # its own threshold (rows of its filled screen: count them once with --show)
    python benchmarks/first_frame.py "top:rows=8=python -m tuimon top" "nvitop=nvitop --interval 1"

`:rows=N` after a name: that command's frame is N non-empty rows (default --rows), for a screen that
holds fewer when filled (`top` on a small host) — compare such a command with others at the same N.
A command that exits, or shows fewer rows by --timeout, counts as no frame (its last screen line is
printed). The output is read as it comes and timestamped on arrival; it is emulated only while the
program writes nothing (the emulator costs 2-50 ms a 4 KB read: emulating as it came would hold
up reads, and a full pty holds up the program). The time is the arrival of the read that completed
the rows. Needs pyte (requirements-dev.txt); on the GPU machine carry it as a wheel.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import select
import shlex
import signal
import statistics
import struct
import subprocess
import termios
import time

import pyte

IDLE_S = 0.02  # no output this long: emulate what came


def first_frame(cmd: list[str], cols: int, rows: int, want: int, timeout: float, show: bool = False
                ) -> tuple[float | None, str, int]:
    """(seconds from spawn until `want` non-empty rows, or None; the screen's last non-empty line; the
    most non-empty rows it held).
    show: print the non-empty rows after each read, and the screen once it has them."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(cols), LINES=str(rows))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # (as users run it: bytecode cached)
    screen = pyte.Screen(cols, rows)
    stream = pyte.ByteStream(screen)
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    pending: list[tuple[float, bytes]] = []
    found: float | None = None
    most = 0
    try:
        while found is None and time.monotonic() - t0 < timeout:
            ready, _, _ = select.select([master], [], [], IDLE_S)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # (it ended: its side of the pty is gone)
                    data = b""
                if data:
                    pending.append((time.monotonic() - t0, data))
                    continue
            for t, data in pending:  # idle (or ended): emulate what came
                stream.feed(data)
                n = sum(1 for line in screen.display if line.strip())
                most = max(most, n)
                if show:
                    print(f"  {t:.3f} s: {len(data)} bytes, {n} non-empty rows")
                if n >= want:
                    found = t
                    break
            pending.clear()
            if not ready or p.poll() is None:
                continue
            break  # ended
    finally:
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(5)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        os.close(master)
    if show:
        print("\n".join(screen.display))
    for _, data in pending:  # (what came after the timeout's last look: for the note on a start without a frame)
        stream.feed(data)
    last = next((line.strip() for line in reversed(screen.display) if line.strip()), "")
    return found, last, max(most, sum(1 for line in screen.display if line.strip()))


def parse_program(spec: str, rows: int) -> tuple[str, int, str]:
    """NAME=COMMAND or NAME:rows=N=COMMAND -> (name, rows that make its frame, command)."""
    name, eq, command = spec.partition("=")
    if not eq or not command.strip():
        raise ValueError(f"{spec!r}: not NAME=COMMAND")
    if ":rows" in name:
        name, _, n = spec.partition(":rows=")
        n, eq, command = n.partition("=")
        if not n.isdigit() or int(n) < 1 or not eq or not command.strip():
            raise ValueError(f"{spec!r}: not NAME:rows=N=COMMAND (N a whole number >= 1)")
        return name, int(n), command
    return name, rows, command


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("programs", nargs="+", metavar="NAME[:rows=N]=COMMAND",
                    help="a name (':rows=N': its own row threshold), '=', and a shell-quoted command")
    ap.add_argument("--starts", type=int, default=5)
    ap.add_argument("--size", default="120x40")
    ap.add_argument("--rows", type=int, default=15, help="non-empty rows that make a frame (default 15)")
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--show", action="store_true", help="each read's rows, and the screen at the frame")
    args = ap.parse_args()
    cols, rows = (int(x) for x in args.size.split("x"))
    programs: dict[str, tuple[list[str], int]] = {}
    for spec in args.programs:
        try:
            name, want, command = parse_program(spec, args.rows)
        except ValueError as e:
            ap.error(str(e))
        programs[name] = (shlex.split(command), want)
    times: dict[str, list[float | None]] = {name: [] for name in programs}
    notes: dict[str, str] = {}
    for cmd, want in programs.values():  # uncounted: bytecode, page cache
        first_frame(cmd, cols, rows, want, args.timeout)
    for k in range(args.starts):
        for name, (cmd, want) in programs.items():
            t, last, most = first_frame(cmd, cols, rows, want, args.timeout, args.show)
            times[name].append(t)
            print(f"start {k + 1}: {name:<12} {'no frame' if t is None else f'{t:.3f} s'}", flush=True)
            if t is None:
                notes[name] = f"at most {most} non-empty rows; last line: {last[:100]!r}"
    print(f"\nfirst frame: spawn until {args.rows} non-empty rows (or a program's own rows=) of {cols}x{rows} "
          f"(pyte), {args.starts} alternating starts each")
    w = max(14, *(len(name) + 2 for name in times))
    print(f"{'program':<{w}}{'rows':>5}{'min s':>8}{'median s':>10}{'max s':>8}{'frames':>8}")
    for name, ts in times.items():
        ok = [t for t in ts if t is not None]
        want = programs[name][1]
        if ok:
            print(f"{name:<{w}}{want:>5}{min(ok):>8.3f}{statistics.median(ok):>10.3f}{max(ok):>8.3f}"
                  f"{len(ok):>5}/{len(ts)}")
        else:
            print(f"{name:<{w}}{want:>5}{'n/a':>8}{'n/a':>10}{'n/a':>8}{0:>5}/{len(ts)}")
    for name, why in notes.items():
        print(f"  {name}: no frame; {why}")


if __name__ == "__main__":
    main()
