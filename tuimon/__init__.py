"""tuimon: a terminal monitor for GPU training processes.

In a training script (optional: `tuimon run` installs the probe without code changes):

    import tuimon
    tuimon.instrument()
    with tuimon.range("forward"): ...
    tuimon.count("samples", batch_size)
"""

__version__ = "0.1.0"

from .probe import count, instrument, range, status, step  # noqa: E402

__all__ = ["__version__", "count", "instrument", "range", "status", "step"]
