"""The colours (Rich styles) the panels give each verdict, comparison state and phase."""

from __future__ import annotations

VERDICT_STYLE = {"exited": "bold red", "stalled": "bold red", "copy-bound": "bold yellow",
                 "input-bound": "bold yellow", "sync-bound": "bold red", "host-bound": "bold red",
                 "memory-bound": "bold magenta", "compute-bound": "bold green", "healthy": "bold green",
                 "mixed": "bold", "waiting": "dim"}


BASELINE_STYLE = {"regression": "bold red", "faster": "bold green", "same": "bold green", "collecting": "dim"}


PHASE_STYLE = {"data": "yellow", "copy": "bright_yellow", "forward": "blue", "backward": "magenta", "optimizer": "cyan",
               "sync": "red",
               "comm": "green", "other": "grey50"}
