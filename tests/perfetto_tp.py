"""Perfetto's trace processor for tests. The `perfetto` package (requirements-dev.txt) runs a
trace_processor_shell binary that it downloads on first use, which cannot work offline (this
machine, CI: only package registries are reached, and no registry package ships the binary).
Give it one:
- TUIMON_TRACE_PROCESSOR=/path/to/trace_processor_shell, or
- the package's own cache (~/.local/share/perfetto/prebuilts/trace_processor_shell-*), which any
  online run fills: python -c "from perfetto.trace_processor import TraceProcessor as T; T(trace='x.json')"
Without one, the checks that need it skip and say why (the rest of each test still runs)."""

import glob
import os
from contextlib import contextmanager

import pytest

CACHE = os.path.expanduser("~/.local/share/perfetto/prebuilts/trace_processor_shell*")


def binary() -> str | None:
    path = os.environ.get("TUIMON_TRACE_PROCESSOR")
    if path:
        return path
    found = [p for p in glob.glob(CACHE) if not p.endswith(".tmp") and os.access(p, os.X_OK)]
    return max(found, key=os.path.getmtime) if found else None


@contextmanager
def trace_processor(trace: str):
    try:
        from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig
    except ImportError:
        pytest.skip("the perfetto package is not installed (requirements-dev.txt)")
    path = binary()
    if path is None:
        pytest.skip("no trace_processor_shell here (offline): set TUIMON_TRACE_PROCESSOR (tests/perfetto_tp.py)")
    tp = TraceProcessor(trace=trace, config=TraceProcessorConfig(bin_path=path))
    try:
        yield tp
    finally:
        tp.close()
