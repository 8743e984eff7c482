"""The Nsight Compute hand-off (capture/ncu.py): a kernel's function name as ncu's default
--kernel-name-base has it, the launches to skip, every word shell-quoted; from a Kineto GPU trace
(tests/fixtures/kineto_gpu_trace.json: the shape torch 2.x writes for a GPU run) and from nsys's
cuda_gpu_kern_sum rows; and `tuimon capture --json`'s `ncu_commands`."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tuimon.capture import ncu
from tuimon.capture.summary import nsys_kernels, summarize
from tuimon.model import CaptureStatus, CaptureSummary, KernelRow

TRACE = str(ROOT / "tests" / "fixtures" / "kineto_gpu_trace.json")


@pytest.mark.parametrize(("name", "function"), [
    ("ampere_sgemm_128x64_tn", "ampere_sgemm_128x64_tn"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >"
     "(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)", "vectorized_elementwise_kernel"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*)",
     "vectorized_layer_norm_kernel"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>(cutlass_80_tensorop_s1688gemm_64x64_"
     "16x6_tn_align4::Params)", "Kernel2"),
    ("", ""),  # (no name: no command)
    ("'; rm -rf ~ #", ""),
])
def test_function_name_as_ncu_matches_it(name, function):
    assert ncu.function_name(name) == function


def test_a_trace_with_cuda_kernels_gives_one_command_per_top_function():
    st = CaptureStatus(seq=2, state="done", kind="kineto", first_step=11, last_step=15, path=TRACE)
    s = summarize(st)
    assert s.state == "done", s.error
    by_name = {k.name.split("(")[0]: k for k in s.kernels}
    add = by_name["void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
                  "at::detail::Array<char*, 3> >"]
    assert (add.calls, add.function_calls) == (15, 25)  # (fill's 10 launches are the same function's)
    cmd = ["python", "train.py", "--out", "my dir/run 1", "--tag=$(whoami)"]
    cmds = ncu.ncu_commands(s.kernels, ncu.window_steps(st), 4242, cmd, top=5)
    assert cmds == [
        "ncu --kernel-name 'regex:^ampere_sgemm_128x64_tn$' --launch-skip 10 --launch-count 1 -o tuimon-4242-1 -- "
        "python train.py --out 'my dir/run 1' '--tag=$(whoami)'",
        "ncu --kernel-name 'regex:^Kernel2$' --launch-skip 5 --launch-count 1 -o tuimon-4242-2 -- "
        "python train.py --out 'my dir/run 1' '--tag=$(whoami)'",
        "ncu --kernel-name 'regex:^vectorized_layer_norm_kernel$' --launch-skip 5 --launch-count 1 -o tuimon-4242-3 "
        "-- python train.py --out 'my dir/run 1' '--tag=$(whoami)'",
        "ncu --kernel-name 'regex:^vectorized_elementwise_kernel$' --launch-skip 25 --launch-count 1 -o tuimon-4242-4 "
        "-- python train.py --out 'my dir/run 1' '--tag=$(whoami)'",
    ]
    assert shlex.split(cmds[0])[-4:] == cmd[1:]  # (the job's words come back as they were)
    with_cmds = ncu.with_ncu_commands(s, st, 4242, cmd)
    assert with_cmds.ncu_commands == cmds[:ncu.TOP]


def test_a_window_without_steps_counts_as_one_and_no_command_line_gives_none():
    k = [KernelRow(name="ampere_sgemm_128x64_tn", calls=7, ms=1.0, function_calls=7)]
    assert "--launch-skip 35 " in ncu.ncu_commands(k, 0, 1, ["a.out"])[0]
    assert ncu.ncu_commands(k, 5, 1, []) == []
    failed = CaptureSummary(state="failed", kernels=k)
    assert ncu.with_ncu_commands(failed, CaptureStatus(seq=1, state="done", kind="nsys"), 1, ["a"]) is failed


def test_nsys_kernel_rows_sum_a_functions_launches():
    rows = [{"name": "ampere_sgemm_128x64_tn", "time_pct": "50.0", "total_ns": "1,000,000", "instances": "1,200"},
            {"name": "void at::native::vectorized_elementwise_kernel<4, A>(int, A)", "instances": "30", "total_ns": "5"},
            {"name": "void at::native::vectorized_elementwise_kernel<2, B>(int, B)", "instances": "10", "total_ns": "5"},
            {"name": "broken", "instances": "n/a"}]
    ks = nsys_kernels(rows)
    assert [(k.calls, k.function_calls) for k in ks] == [(1200, 1200), (30, 40), (10, 40)]
    assert ks[0].ms == 1.0


def test_tuimon_capture_json_carries_ncu_commands(monkeypatch):
    """`tuimon capture --json`'s report: the window's status, its summary, and `ncu_commands`
    (the report function fed a done Kineto window on the fixture trace)."""
    import argparse
    import io

    from tuimon.cli import capture as cli

    out, stdout = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", stdout)
    st = CaptureStatus(seq=1, state="done", kind="kineto", first_step=3, last_step=7, path=TRACE)
    rc = cli._report(st, "kineto", True, argparse.Namespace(json=True, timeout=5), out, lambda: None,
                     ncu_for=(4242, ["python", "train.py"]))
    assert rc == 0
    doc = json.loads(stdout.getvalue())
    assert doc["ncu_commands"][0] == ("ncu --kernel-name 'regex:^ampere_sgemm_128x64_tn$' --launch-skip 10 "
                                      "--launch-count 1 -o tuimon-4242-1 -- python train.py")
    assert doc["summary"]["ncu_commands"] == doc["ncu_commands"] and len(doc["ncu_commands"]) == ncu.TOP
    assert "one launch of each top kernel in Nsight Compute" in out.getvalue()


def test_the_fixture_is_what_torch_writes_for_a_gpu_run():
    """The boundary CI lacks, kept honest: Chrome-trace "X" events, kernels on the device's pid
    with the args CUPTI's activity records give them, and their launches' correlation ids."""
    with open(TRACE) as f:
        doc = json.load(f)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    launches = {e["args"]["correlation"] for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"}
    assert kernels and all(e["ph"] == "X" and {"stream", "correlation", "grid", "block", "device"} <= set(e["args"])
                           for e in kernels)
    assert {e["args"]["correlation"] for e in kernels} == launches
    assert doc["deviceProperties"][0]["name"] == "NVIDIA H200"
    subprocess.run([sys.executable, "-m", "tuimon.capture.trace_summary", TRACE], check=True, capture_output=True)
