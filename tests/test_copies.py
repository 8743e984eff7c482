"""The probe's copy accounting (probe/copies.py) on CPU tensors: which .to() targets are a CUDA
device, and what a host-to-device copy adds to the step's counts. (The copies themselves need a GPU:
tests/gpu/check_lines.py's planted copy loop.)"""

import pytest
import torch

from tuimon.probe import copies


@pytest.mark.parametrize("target, cuda", [
    (torch.device("cuda"), True), (torch.device("cuda", 1), True), (torch.device("cpu"), False),
    ("cuda", True), ("cuda:0", True), ("cpu", False), (0, True), (True, False), (None, False),
    (torch.float16, False), (torch.zeros(1), False),  # .to(dtype), .to(a CPU tensor)
])
def test_which_to_targets_are_a_cuda_device(target, cuda):
    assert copies.to_cuda(target) is cuda


def test_a_host_to_device_copy_counts_its_bytes_and_how_it_was_made():
    emitted = []
    c = copies.Copies(lambda *rec: emitted.append(rec), intern=lambda name: copies.Copies.NAMES.index(name) + 1)
    pageable = torch.zeros(1000, dtype=torch.float32)  # 4,000 bytes, not pinned (no CUDA here)
    c.host_to_device(pageable, non_blocking=False)
    c.host_to_device(pageable[:10], non_blocking=True)
    c.host_to_device("not a tensor", non_blocking=True)  # ignored, never raised
    c.device_to_host(torch.zeros(3, dtype=torch.int64))
    c.close(step=7, t1=123, tid=1)
    got = {copies.Copies.NAMES[r[2] - 1]: r[7] for r in emitted}
    assert got == {"copy.h2d_bytes": 4040.0, "copy.h2d_pageable_bytes": 4040.0, "copy.h2d_blocking_bytes": 4000.0,
                   "copy.h2d_calls": 2.0, "copy.d2h_bytes": 24.0}
    assert all(r[4] == 7 and r[6] == 123 for r in emitted)
    emitted.clear()
    c.close(step=8, t1=200, tid=1)  # nothing since: no records
    assert emitted == []


class HostBuffer:
    """A host tensor as the copy accounting sees it, pinned or not (pinned memory needs CUDA, absent
    here: the GPU side is tests/gpu/check_probe_cost's pinned batches), counting the driver's asks."""

    nbytes = 100

    def __init__(self, ptr: int, pinned: bool):
        self.ptr, self.pinned, self.asked = ptr, pinned, 0

    def data_ptr(self) -> int:
        return self.ptr

    def is_pinned(self) -> bool:
        self.asked += 1
        return self.pinned


def test_an_address_found_pinned_is_not_asked_again_for_a_while():
    c = copies.Copies(lambda *rec: None, intern=lambda name: 1)
    pinned, pageable = HostBuffer(0x1000, True), HostBuffer(0x2000, False)
    for _ in range(3):
        c.host_to_device(pinned, non_blocking=True)
        c.host_to_device(pageable, non_blocking=True)
    assert (pinned.asked, pageable.asked) == (1, 3)  # a pageable answer is never taken as known
    assert (c.pageable, c.h2d) == (300, 600)
    c.close(step=1, t1=copies.PINNED_FOR_NS + 1, tid=1)  # the remembered addresses expire
    c.host_to_device(pinned, non_blocking=True)
    assert pinned.asked == 2
    pinned.pinned = False  # (the address now pageable memory: known once the memory is forgotten)
    c.close(step=2, t1=3 * copies.PINNED_FOR_NS, tid=1)
    c.host_to_device(pinned, non_blocking=True)
    assert c.pageable == 100
