"""The words of the verdicts that branch on the evidence (an end's kind, a cpu-bound job's threads):
each branch reached, and each edge on both sides, so a == made != or a < made <= shows."""

import signal

import pytest

from tests.helpers.flat_evidence import flat_evidence as Evidence
from tuimon.analysis import thresholds as T
from tuimon.analysis.verdicts import diagnose
from tuimon.analysis.verdicts.base import loop_cpu, margin
from tuimon.analysis.verdicts.exited import batch_cut_off, exited_words
from tuimon.model import CopyTimes, JobEnd, Memory

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


@pytest.mark.parametrize("end, headline, step", [
    (JobEnd(how="exception", headline="exited with code 1: " + OOM, exit_code=1, exception=OOM),
     "exited (code 1): torch.OutOfMemoryError", "the GPU ran out of memory"),
    (JobEnd(how="exception", headline="h", exit_code=0, exception="RuntimeError: NCCL error"),
     "exited: RuntimeError", "a collective failed"),
    (JobEnd(how="exception", headline="h", exception="RuntimeError: ProcessGroup gone"), "exited: RuntimeError",
     "a collective failed"),
    (JobEnd(how="exception", headline="h", exception="x.DistBackendError: gone"), "exited: x.DistBackendError",
     "a collective failed"),
    (JobEnd(how="exception", headline="h", exception="RuntimeError: DataLoader worker (pid 7) is killed"),
     "exited: RuntimeError", "a DataLoader worker died"),
    (JobEnd(how="exception", headline="h", exception="EOFError: x", frames=["at torch/utils/data/x.py:3"]),
     "exited: EOFError", "a DataLoader worker died"),
    (JobEnd(how="signal", headline="killed by SIGKILL: the kernel", exit_code=-9), "exited: killed by SIGKILL",
     "SIGKILL leaves no trace"),
    (JobEnd(how="signal", headline="killed by SIGTERM: x", exit_code=-15), "exited: killed by SIGTERM",
     "stopped from outside"),
    (JobEnd(how="clean", headline="finished", exit_code=0), "exited: finished", "nothing to fix"),
    (JobEnd(how="exception", headline="h", exit_code=2, exception="ValueError: bad", log="/tmp/log"),
     "exited (code 2): ValueError", "the exception above ended it: its output is in /tmp/log"),
    (JobEnd(how="unknown", headline="h"), "exited", "run it under `tuimon run`"),
    (JobEnd(how="exit code", headline="h", exit_code=3, log="/tmp/log"), "exited (code 3)", "its output: /tmp/log"),
    (JobEnd(how="exit code", headline="h", exit_code=3), "exited (code 3)", "its exit code says"),
])
def test_an_end_in_words(end, headline, step):
    got = exited_words(end, None)
    assert got[0] == headline and got[2].startswith(step), got
    v = diagnose(Evidence(job_end=end))
    assert v.code == "exited" and v.confidence == ("medium" if end.how == "unknown" else "high")


def test_an_end_names_where_and_what_ran_before_it():
    end = JobEnd(how="exception", headline="exited with code 1: ValueError: x", exit_code=1,
                 exception="ValueError: x", frames=["at train.py:3 in main"])
    m = Memory(allocated=2**30, reserved=2**31, peak_allocated=2**31, total=2**32, alloc_retries=3, ooms=0)
    _, evidence, _ = exited_words(end, m, ran_as="input-bound")
    assert evidence == ("exited with code 1: ValueError: x · at train.py:3 in main · while it ran: input-bound · GPU "
                        "memory last read: allocated 1.0 GiB, reserved 2.0 GiB, peak 2.0 GiB of 4.0 GiB (50%); "
                        "3 allocator retries in all")


def test_a_socket_error_is_a_batch_cut_off_only_inside_the_dataloader():
    assert batch_cut_off("ConnectionResetError: x", ["at torch/utils/data/dataloader.py:1"])
    assert not batch_cut_off("ConnectionResetError: x", ["at train.py:1"])
    assert not batch_cut_off("ValueError: x", ["at torch/utils/data/dataloader.py:1"])


CPU = dict(steps=50, step_ms=27.0, data_share=0.01, sync_share=0.0, loop_cpu=97.0, cuda=False,
           phases={"data": 0.01, "forward": 0.35, "backward": 0.52, "optimizer": 0.01, "other": 0.11})


def test_cpu_bound_on_the_loop_thread_alone_below_50_points_of_other_threads():
    alone = "the ops run on the loop thread alone"
    assert diagnose(Evidence(**CPU, job_cpu=146.9, cpus=2)).next_step.startswith(alone)
    assert not diagnose(Evidence(**CPU, job_cpu=147.0, cpus=2)).next_step.startswith(alone)
    assert not diagnose(Evidence(**CPU, job_cpu=100.0, cpus=1)).next_step.startswith(alone)  # one core: no more
    opt = diagnose(Evidence(**{**CPU, "phases": {"forward": 0.2, "backward": 0.3, "optimizer": 0.3, "other": 0.2}},
                            job_cpu=100.0, cpus=2))
    assert opt.headline == "CPU-bound: the optimizer step"
    tie = diagnose(Evidence(**{**CPU, "phases": {"forward": 0.3, "backward": 0.3, "optimizer": 0.3, "other": 0.1}},
                            job_cpu=100.0, cpus=2))
    assert tie.headline == "CPU-bound: the optimizer step"  # (the model's largest part, tied)


def test_confidence_is_high_a_quarter_past_the_threshold():
    t = T.MODEL_MAJORITY  # 0.5
    assert [margin(v, t) for v in (0.625, 0.6249, None)] == ["high", "medium", "low"]
    assert [margin(v, t, above=False) for v in (0.375, 0.3751)] == ["high", "medium"]


def test_a_wait_for_a_core_counts_from_half_a_percent():
    assert loop_cpu(Evidence(loop_cpu=50.0, loop_cpu_wait=0.5)) == (50.5, "loop thread at 50% CPU + 0% waiting for a core")
    assert loop_cpu(Evidence(loop_cpu=50.0, loop_cpu_wait=0.49)) == (50.0, "loop thread at 50% CPU")
    assert loop_cpu(Evidence(loop_cpu=None, loop_cpu_wait=3.0))[0] is None


def copy_step(**kw) -> str:
    cp = CopyTimes(**{**dict(share=0.3, ms=9.0, h2d_mb=100.0, pageable=0.0, blocking=0.0, calls=2.0), **kw})
    return diagnose(Evidence(steps=50, step_ms=30.0, data_share=0.01, sync_share=0.0, copies=cp,
                             phases={"copy": 0.3, "other": 0.7})).next_step


def test_a_copy_bound_job_gets_the_fix_for_how_it_copies():
    assert copy_step(pageable=0.5).startswith("the batch is copied from pageable memory")
    assert copy_step(pageable=0.49, blocking=0.5).startswith("pinned, but copied without non_blocking=True")
    assert copy_step(pageable=0.49, blocking=0.49).startswith("100 MB a step, pinned and asynchronous")
    assert copy_step(d2h_mb=100.0).endswith("100.0 MB come back to the host each step: keep them on the GPU")
    assert "come back" not in copy_step(d2h_mb=99.9)
    assert "come back" not in copy_step(h2d_mb=0.0, d2h_mb=0.0)


def test_comm_bound_says_the_mean_of_the_ranks_from_two():
    e = dict(steps=50, step_ms=30.0, data_share=0.01, sync_share=0.0, comm_share=0.3)
    assert "(the mean of 2 ranks)" in diagnose(Evidence(**e, ranks=2)).evidence
    assert "the mean of" not in diagnose(Evidence(**e, ranks=1)).evidence


def test_an_oom_with_as_much_reserved_unallocated_as_it_asked_is_fragmentation():
    from tuimon.analysis.verdicts.exited import oom_step

    def said(asked: str, spare: str) -> str:
        return oom_step(f"CUDA out of memory. Tried to allocate {asked}. GPU 0 has a total capacity of 79.10 GiB of "
                        f"which 1.00 GiB is free. {spare} is reserved by PyTorch but unallocated.", None)

    assert "fragmentation: PYTORCH_CUDA_ALLOC_CONF" in said("2.00 GiB", "2.00 GiB")
    assert said("2.00 GiB", "1.99 GiB").startswith("the GPU ran out of memory asking for 2.0 GiB (1.0 GiB free on")
    assert oom_step("CUDA out of memory.", None).startswith("the GPU ran out of memory: a smaller batch")


def test_compute_bound_on_tensor_cores_or_on_the_other_pipes():
    gpu = dict(steps=50, step_ms=30.0, data_share=0.01, sync_share=0.0, gpm=True, sm_active=95.0, dram_bw=5.0)
    assert diagnose(Evidence(**gpu, tensor_active=90.0, fp32_active=2.0)).next_step.startswith(
        "tensor cores 90% busy: the math itself is the limit")
    assert diagnose(Evidence(**gpu, tensor_active=2.0, fp32_active=90.0)).next_step.startswith(
        "FP32 pipes 90% busy, tensor cores 2%: move the math to tensor cores")


@pytest.mark.parametrize("sig", ["SIGILL", "SIGABRT", "SIGBUS", "SIGFPE", "SIGSEGV", "SIGSYS"])
def test_a_death_by_the_processs_own_fault_is_a_native_crash(sig):
    """Each signal a process raises on itself (a bad instruction, abort(), a bad address, a division by
    zero, a segfault, a bad system call) is a crash in native code; SIGTERM and SIGINT come from outside."""
    code = -int(getattr(signal, sig))
    got = exited_words(JobEnd(how="signal", headline=f"killed by {sig}", exit_code=code), None)
    assert got[2].startswith("a crash in native code"), got
    for outside in (-int(signal.SIGTERM), -int(signal.SIGINT)):
        assert exited_words(JobEnd(how="signal", headline="x", exit_code=outside), None)[2].startswith(
            "stopped from outside")
