"""`tuimon inject PID` and `tuimon attach PID --inject`: load the probe into a running job (every
rank of it on this node when PID is a launcher), then say what happened, one line a process."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ..inject import load_each
from ..inject.ranks import training_processes

if TYPE_CHECKING:
    import argparse

__all__ = ["cmd_inject", "load", "training_processes"]


def cmd_inject(args: argparse.Namespace) -> int:
    return load(args.pid, args.wait)


def load(pid: int, wait_s: float) -> int:
    """Inject into pid's training processes; 0 if the probe runs in each, 2 otherwise (said why)."""
    failed = False
    for done in load_each(training_processes(pid), wait_s):
        if done.loaded is not None:
            print(f"tuimon: probe loaded into {done.pid} in {done.loaded.seconds:.2f} s (steps are counted from its "
                  f"first whole step on): tuimon attach {pid}", file=sys.stderr)
            continue
        failed = True
        print(f"tuimon: {done.pid}: {'' if done.pending else 'not loaded: '}{done.why}", file=sys.stderr)
    return 2 if failed else 0
