"""The probe's marks on the functions it puts in torch's place: `_tuimon` (this is a wrapper of
the probe's: not wrapped twice), `_tuimon_times_forward` (a module class's forward wrapper that opens
the forward phase itself: torch_hooks.ModuleRoots leaves its class's __call__ as it is). Set once, when a
wrapper is made, never on the hot path; read with getattr(fn, name, False)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

WRAPPED = "_tuimon"
TIMES_FORWARD = "_tuimon_times_forward"


def mark(fn: Callable[..., Any], name: str = WRAPPED) -> None:
    """Mark fn (a function's attributes are its own: a plain setattr, which a type checker cannot
    see through a Callable)."""
    setattr(fn, name, True)
