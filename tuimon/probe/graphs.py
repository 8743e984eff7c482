"""CUDA-graph captures in progress: while one is open, the probe makes no CUDA call and counts no op.

The rule: between a CUDAGraph's capture_begin and its capture_end (torch.cuda.graph,
make_graphed_callables and torch.compile's CUDA graphs all go through them), nothing of the probe
touches the GPU, on any thread: no event recorded, queried or made, no pointer's attributes asked,
no allocator read, no dispatch mode entered, no capture window opened. Why:
- an event recorded on the capturing stream becomes a node of the job's graph (and one made with
  timing cannot be captured at all: the capture is invalidated);
- in the default capture mode ("global"), a call the capture forbids (cudaEventQuery among them)
  from any thread of the process invalidates it: capture_end then fails with
  cudaErrorStreamCaptureInvalidated and the job dies.
Host-side bookkeeping (phases, steps, ranges into the ring) goes on. `open_captures` counts the
captures begun through torch's CUDAGraph and not yet ended; `capturing(cuda)` adds the current
stream's own state (a capture begun some other way on this thread), asked only where the probe is
about to touch the GPU (a measured step: a few times a second).

The monitor is told: a gauge cuda.graph_capturing (1 at capture_begin, 0 at capture_end)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from time import monotonic_ns as _now
from typing import Any

from ..channel import layout as L
from ..channel import ring
from . import state
from .marks import mark

open_captures = 0  # captures begun and not yet ended, in any thread of the process


def capturing(cuda: Any) -> bool:
    """Whether the probe must keep off the GPU now (cuda: torch.cuda)."""
    if open_captures:
        return True
    try:
        return bool(cuda.is_current_stream_capturing())
    except Exception:  # noqa: BLE001 - a torch that cannot say: only the counted captures
        return False


def patch(torch: Any, swap: Any) -> None:
    """Count captures at torch.cuda.CUDAGraph's capture_begin and capture_end (swap: torch_hooks._swap)."""
    graph = getattr(getattr(torch, "cuda", None), "CUDAGraph", None)
    if not isinstance(graph, type):
        return
    begin, end = getattr(graph, "capture_begin", None), getattr(graph, "capture_end", None)
    if begin is None or end is None or getattr(begin, "_tuimon", False):
        return
    swap(graph, "capture_begin", _begin(begin))
    swap(graph, "capture_end", _end(end))


def _begin(orig: Any) -> Callable[..., Any]:
    @functools.wraps(orig)
    def capture_begin(*args: Any, **kwargs: Any) -> Any:
        global open_captures
        open_captures += 1  # (before the capture starts: no probe call may land inside it)
        try:
            _leave_counted_step()
            _say(1.0)
        except Exception:  # noqa: BLE001 - never into the job
            pass
        try:
            return orig(*args, **kwargs)
        except BaseException:
            open_captures = max(0, open_captures - 1)  # (no capture began)
            raise

    mark(capture_begin)
    return capture_begin


def _end(orig: Any) -> Callable[..., Any]:
    @functools.wraps(orig)
    def capture_end(*args: Any, **kwargs: Any) -> Any:
        global open_captures
        try:
            return orig(*args, **kwargs)
        finally:
            open_captures = max(0, open_captures - 1)  # (after: the capture has ended, or failed for good)
            if not open_captures:
                try:
                    _say(0.0)
                except Exception:  # noqa: BLE001
                    pass

    mark(capture_end)
    return capture_end


def _leave_counted_step() -> None:
    """A step whose ops are being counted: its dispatch mode left before the capture starts."""
    p = state.probe
    ops = p.ops if p is not None else None
    if ops is not None and p is not None and ops.mode is not None and p.anatomy.on_loop():
        ops.abandon()


def _say(value: float) -> None:
    p = state.probe
    if p is not None:
        p.emit(L.GAUGE, 0, p.intern("cuda.graph_capturing"), ring.thread_id(), p.step_no, 0, _now(), value)
