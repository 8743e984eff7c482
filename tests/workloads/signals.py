"""A job that writes each signal it gets to a file, one line each, and ends with a known code.

    signals.py OUT [--stubborn] [--child] [--orphans N] [--seconds S]

Writes "ready PID" once its handlers are in place. SIGTERM, SIGINT, SIGQUIT: writes the signal's
name and exits with EXIT_BASE + its number (55 for SIGTERM: not 128+N, so a wrapper that keeps the
job's code is told apart from one that makes its own), or with --stubborn only writes it (SIGKILL
ends it). SIGHUP: writes HUP and goes on. --child: a child in the same process group that does
the same, writing "child NAME". --orphans N: N grandchildren whose parent exits at once (they are
re-parented to PID 1 or a subreaper), each writing "orphan PID" and exiting 0.5 s later.
Without a signal it exits 0 after --seconds (default 120)."""

import os
import signal
import sys
import time

EXIT_BASE = 40


def note(out: str, line: str) -> None:
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (line + "\n").encode())  # one write: lines of parent and child never mix
    finally:
        os.close(fd)


def listen(out: str, who: str, stubborn: bool) -> None:
    def on_signal(signum, frame):
        name = signal.Signals(signum).name.removeprefix("SIG")
        note(out, f"{who}{name}")
        if signum != signal.SIGHUP and not stubborn:
            os._exit(EXIT_BASE + signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, on_signal)


def orphans(out: str, n: int) -> None:
    for _ in range(n):
        if os.fork() == 0:  # the parent of the orphan: gone at once
            if os.fork() == 0:
                time.sleep(0.5)
                note(out, f"orphan {os.getpid()}")
            os._exit(0)
    for _ in range(n):
        os.wait()


def main() -> None:
    args = sys.argv[1:]
    out = args[0]
    stubborn, child = "--stubborn" in args, "--child" in args
    seconds = float(args[args.index("--seconds") + 1]) if "--seconds" in args else 120.0
    listen(out, "", stubborn)
    if child and os.fork() == 0:
        listen(out, "child ", stubborn)
        note(out, f"child ready {os.getpid()}")
        time.sleep(seconds)
        os._exit(0)
    if "--orphans" in args:
        orphans(out, int(args[args.index("--orphans") + 1]))
    note(out, f"ready {os.getpid()}")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.05)


if __name__ == "__main__":
    main()
