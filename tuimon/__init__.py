"""tuimon: a terminal monitor for GPU training processes.

In a training script (optional: `tuimon run` installs the probe without code changes):

    import tuimon
    tuimon.instrument()
    with tuimon.range("forward"): ...
    tuimon.count("samples", batch_size)
"""

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "count", "instrument", "range", "status", "step"]


def __getattr__(name: str) -> Any:
    """The probe's API, imported on first use: the monitor (`tuimon attach`) never needs it."""
    if name in ("count", "instrument", "range", "status", "step"):
        from . import probe

        value = getattr(probe, name)
        globals()[name] = value  # later lookups are plain module attributes
        return value
    raise AttributeError(f"module 'tuimon' has no attribute {name!r}")
