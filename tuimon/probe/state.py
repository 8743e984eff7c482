"""The probe this process reports to, held in one place that every probe module reads.

A leaf module (it imports nothing at run time): the modules that share the probe never import each other to
reach it. Only api.py sets it: to the probe on instrument() and switch(on); to None on
switch(off) and in a forked child, so every hook and patched function goes quiet at once."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .core import Probe

probe: Probe | None = None
