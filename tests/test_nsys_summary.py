"""An nsys window's summary (capture/summary.py, capture/nsys.py) through a stand-in `nsys stats`
(tests/helpers/fake_nsys.py): a report that holds fewer kernels than the window launched (nsys's CUDA
trace buffers filled: seen on an H200, where a 20-step window kept ~36,000 of ~66,000 and its top kernels
were wrong) says so beside the top kernels, past both published floors (1,000 kernels and 5%)."""

from __future__ import annotations

import os

import pytest

from tests.conftest import HELPERS
from tuimon.capture import nsys as nsys_tools
from tuimon.capture.summary import summarize
from tuimon.model import CaptureStatus


@pytest.fixture
def report(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nsys").symlink_to(HELPERS / "fake_nsys.py")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NSYS_DIR", str(tmp_path))
    path = tmp_path / "w.nsys-rep"
    path.write_bytes(b"report")
    return str(path)


@pytest.mark.parametrize(("name", "one_kernel"), [
    ("cudaLaunchKernel", True), ("cudaLaunchKernel_v7000", True), ("cudaLaunchKernelExC_v11060", True),
    ("cuLaunchKernel", True), ("cuLaunchKernelEx", True), ("cudaLaunchCooperativeKernel", True),
    ("cudaGraphLaunch", False), ("cuGraphLaunch", False), ("cudaMemcpyAsync", False), ("", False),
])
def test_which_api_calls_launch_one_kernel(name, one_kernel):
    assert nsys_tools.launches_one_kernel(name) is one_kernel


@pytest.mark.parametrize(("kept", "launched", "said"), [
    (36, 36, False),
    (9_000, 10_000, False),  # 1,000 lost: 10%, but not past the 1,000-kernel floor
    (8_999, 10_000, True),
    (95_000, 100_000, False),  # 5,000 lost: past 1,000, but not past 5%
    (94_999, 100_000, True),
    (70_000, 66_000, False),  # (kernels queued before the window ran in it: more rows than launches)
])
def test_a_loss_is_said_past_both_floors(kept, launched, said):
    s = {"kernel_records": kept, "kernel_launches": launched}
    assert nsys_tools.kernels_lost(s) == ((kept, launched) if said else None)
    assert nsys_tools.kernels_lost({"kernel_records": kept}) is None  # (no API summary: nothing to say)


@pytest.mark.parametrize(("rows", "total"), [
    ([{"Instances": "1,200"}, {"Instances": "36"}], 1236),
    ([{"Instances": "12"}, {"Instances": ""}], None),  # (a cell with no number: no count, rather than a short one)
    ([{"Instances": "12"}, {"Name": "k"}], None),  # (a row without the column)
    ([], 0),
])
def test_a_column_is_summed_only_when_every_row_has_a_number(rows, total):
    assert nsys_tools._total(rows, "Instances") == total


def test_stats_counts_every_kernel_row_and_the_launches_of_one_kernel(report):
    s = nsys_tools.stats("nsys", report, top=1)  # (all rows counted, not only the top one kept)
    assert len(s["cuda_gpu_kern_sum"]) == 1
    assert (s["kernel_records"], s["kernel_launches"]) == (12 + 24, 36)  # (the graph launches left out)


def test_a_complete_report_says_nothing_of_a_loss(report):
    s = summarize(CaptureStatus(seq=1, state="done", kind="nsys", path=report))
    assert s.state == "done", s.error
    assert "top kernels:" in s.lines and "ampere_bf16_gemm" in "\n".join(s.lines)
    assert not any("kernels launched in the window" in line for line in s.lines)


def test_a_report_that_lost_kernels_says_so_under_the_top_kernels(report, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_LAUNCHES", "2000")
    s = summarize(CaptureStatus(seq=1, state="done", kind="nsys", path=report))
    at = s.lines.index("top kernels:")
    assert s.lines[at + 3:at + 6] == [  # (after its two kernel rows, before the NVTX ranges)
        "  nsys recorded 36 of the 2,000 kernels launched in the window (its CUDA trace buffers filled):",
        "  the shares above are of those it recorded; a window of fewer steps keeps them all",
        "NVTX ranges:"]
    assert all(len(line) <= 120 for line in s.lines[at + 3:at + 5])  # (the capture screen's width)


def test_a_failed_kernel_report_is_not_read_as_a_loss(report, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_LAUNCHES", "2000")
    monkeypatch.setenv("FAKE_NSYS_FAIL", "kern_sum")
    s = summarize(CaptureStatus(seq=1, state="done", kind="nsys", path=report))
    at = s.lines.index("top kernels:")
    assert "could not be analyzed" in s.lines[at + 1]
    assert not any("kernels launched in the window" in line for line in s.lines)
