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
