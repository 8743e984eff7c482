"""Command-line values, each checked with a plain message: a number out of range, not a number,
nan or infinity is refused by name, never accepted and then misused (a negative timeout, an
infinite window)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..model import Baseline


def number(lo: float, hi: float, unit: str = "", whole: bool = False) -> Callable[[str], float]:
    """An argparse type: a number from lo to hi (whole: an integer), in unit."""
    kind = f"{'whole ' if whole else ''}number{' of ' + unit if unit else ''}"

    def parse(text: str) -> float:
        try:
            v = int(text) if whole else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {kind}: {text!r}") from None
        if not (math.isfinite(v) and lo <= v <= hi):  # (also refuses nan and inf)
            raise argparse.ArgumentTypeError(f"{text} is out of range: {lo:g} to {hi:g}{' ' + unit if unit else ''}")
        return v

    parse.__name__ = kind  # what argparse names in its own messages
    return parse


INTERVAL = number(0.1, 3600, "seconds")  # between samples
WINDOW = number(0, 3600, "seconds")  # --once: read this long first
DURATION = number(0, 10**7, "seconds")  # stop after this long; 0: no limit
SPEED = number(0.01, 1000)  # replay
TIMEOUT = number(0.1, 86400, "seconds")
CAPTURE_STEPS = number(1, 500, "steps", whole=True)
CAPTURE_SECONDS = number(0.1, 300, "seconds")
MINUTES = number(0.01, 10**6, "minutes")  # tuimon trace: of a live job
BASELINE_SECONDS = number(1, 86400, "seconds")
PORT = number(0, 65535, whole=True)  # 0: any free port (said at start)


def baseline_file(path: str) -> tuple[str, Baseline]:
    """--baseline FILE: (FILE, its Baseline), or argparse's error saying what is wrong with it."""
    from ..monitor.baseline import BaselineError, load

    try:
        return path, load(path)
    except BaselineError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


baseline_file.__name__ = "baseline"


def gpu_list(text: str) -> list[int]:
    """--gpus 0,2: which GPUs (NVML's indices, as nvidia-smi shows them)."""
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of GPU indices: {text!r} (e.g. 0,1)") from None
    if not out or min(out) < 0:
        raise argparse.ArgumentTypeError(f"not a list of GPU indices: {text!r} (e.g. 0,1)")
    return out
