"""Copies between the host and the GPU, counted per step: host-to-device copies made by
Tensor.to(), Tensor.cuda() and Tensor.copy_() are the "copy" phase while the host is in them (a
copy from pageable memory blocks it for the whole transfer; from pinned memory with
non_blocking=True it only queues it), with their bytes, and how many of them were pageable;
device-to-host copies (.cpu(), .to("cpu"), copy_ into a CPU tensor) stay the sync phase they are
(the host waits for the GPU first) and count their bytes. Per step: STEP_VALUE records
copy.h2d_bytes, copy.h2d_pageable_bytes, copy.h2d_blocking_bytes (without non_blocking=True),
copy.h2d_calls, copy.d2h_bytes, emitted at the step's end.
Nothing here raises into the loop or imports torch.

Pinned or pageable: is_pinned() asks the driver (1.4 us warm on an H100, several in a step). A pinned
batch comes from torch's caching host allocator, which keeps its blocks: the same few addresses come
back batch after batch, so an address found pinned is taken as pinned again without asking, for at
most PINNED_FOR_NS (an emptied host cache could hand the address to pageable memory; a pageable
answer is never remembered: that copy is slow anyway)."""

from __future__ import annotations

from typing import Any

from ..channel import layout as L
from . import graphs

PINNED_FOR_NS = 10_000_000_000  # how long an address found pinned is taken as pinned (the docstring)
PINNED_MAX = 1024  # addresses remembered at most


def nbytes(t: Any) -> int:
    try:
        return t.nbytes
    except Exception:  # noqa: BLE001 - not a tensor
        return 0


def to_cuda(d: Any) -> bool:
    """Does Tensor.to(d, ...) go to a CUDA device? (d: a device, string, index or tensor; a dtype
    stays where it is). A torch.device, the common case, is asked first."""
    kind = getattr(d, "type", None)  # torch.device (a dtype, a str or an int has no .type)
    if kind.__class__ is str:
        return kind == "cuda"
    if isinstance(d, str):
        return d.startswith("cuda")
    if isinstance(d, int) and not isinstance(d, bool):
        return True  # (a device index: CUDA's)
    return bool(getattr(d, "is_cuda", False))  # .to(other_tensor)


class Copies:
    """This step's copies (the loop thread's; the control thread never touches them)."""

    NAMES = ("copy.h2d_bytes", "copy.h2d_pageable_bytes", "copy.h2d_blocking_bytes", "copy.h2d_calls",
             "copy.d2h_bytes")

    def __init__(self, emit: Any, intern: Any) -> None:
        self._emit = emit
        self._ids = [intern(n) for n in self.NAMES]
        self.h2d = self.pageable = self.blocking = self.calls = self.d2h = 0
        self._pinned: set[int] = set()  # data addresses found pinned since _pinned_since
        self._pinned_since = 0

    def host_to_device(self, src: Any, non_blocking: Any) -> None:
        if graphs.open_captures:
            return  # (is_pinned() asks the driver: not inside a CUDA-graph capture)
        try:
            n = src.nbytes
            ptr = src.data_ptr()
            pinned = ptr in self._pinned or src.is_pinned()
        except Exception:  # noqa: BLE001 - not a tensor
            return
        if pinned and len(self._pinned) < PINNED_MAX:
            self._pinned.add(ptr)
        self.h2d += n
        self.calls += 1
        if not pinned:
            self.pageable += n
        if not non_blocking:
            self.blocking += n

    def device_to_host(self, src: Any) -> None:
        self.d2h += nbytes(src)

    def close(self, step: int, t1: int, tid: int) -> None:
        if not (self.calls or self.d2h):
            return
        if t1 - self._pinned_since > PINNED_FOR_NS:
            self._pinned.clear()
            self._pinned_since = t1
        for nid, v in zip(self._ids, (self.h2d, self.pageable, self.blocking, self.calls, self.d2h), strict=True):
            if v:
                self._emit(L.STEP_VALUE, 0, nid, tid, step, 0, t1, float(v))
        self.h2d = self.pageable = self.blocking = self.calls = self.d2h = 0
