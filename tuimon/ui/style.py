"""The colour (a Rich style) of each name of a vocabulary (model/vocab.py): one mapping per
vocabulary, each covering all of it (tests/test_vocab.py). A phase's name comes from a channel:
its mapping is read with .get() and a default."""

from __future__ import annotations

from ..model.vocab import ComparisonState, VerdictCode

VERDICT_STYLE: dict[VerdictCode, str] = {
    "exited": "bold red", "stalled": "bold red", "waiting": "dim", "memory-growth": "bold red", "straggler": "bold yellow",
    "input-bound": "bold yellow", "copy-bound": "bold yellow", "comm-bound": "bold yellow",
    "memory-bound": "bold magenta", "compute-bound": "bold green", "healthy": "bold green", "cpu-bound": "bold yellow",
    "data-parallel": "bold yellow",
    "sync-bound": "bold red", "host-bound": "bold red", "mixed": "bold", "memory-pressure": "bold red"}
COMPARISON_STYLE: dict[ComparisonState, str] = {"regression": "bold red", "faster": "bold green", "same": "bold green",
                                                "collecting": "dim"}
PHASE_STYLE: dict[str, str] = {"data": "yellow", "copy": "bright_yellow", "forward": "blue", "backward": "magenta",
                               "comm": "green", "optimizer": "cyan", "sync": "red", "other": "grey50"}
