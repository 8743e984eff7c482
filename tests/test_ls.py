"""`tuimon ls`: below the channels, this user's Python processes that hold a GPU context (NVML,
faked at its boundary) and have no channel, each with how to put the probe in; nothing more, and
nothing said, without NVML."""

import argparse
import os
import shutil
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from tests.conftest import tuimon_cmd
from tests.fake_nvml import FakeNvml
from tuimon.channel import SegmentWriter
from tuimon.channel import layout as L
from tuimon.channel.meta import JobMeta
from tuimon.cli import attach
from tuimon.sources.nvml import DeviceSampler

NOBODY = 65534
WAITING = "print('ready', flush=True); import time; time.sleep(120)"


def start(argv):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    if argv[-1] == WAITING:
        assert p.stdout.readline().strip() == "ready"
    return p


def nvml(by_gpu):
    """Fake NVML whose GPU i reports by_gpu[i]'s PIDs as its compute processes."""
    fake = FakeNvml(gpus=len(by_gpu))
    fake.nvmlDeviceGetComputeRunningProcesses = lambda h: fake._call(
        "nvmlDeviceGetComputeRunningProcesses", [SimpleNamespace(pid=pid, usedGpuMemory=2**30) for pid in by_gpu[h]])
    return DeviceSampler(fake)


def ls(capsys, devices):
    assert attach.cmd_ls(argparse.Namespace(), devices=devices) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return out.splitlines()


def row_of(lines, pid):
    rows = [line for line in lines if line.split()[:1] == [str(pid)]]
    assert len(rows) <= 1, rows  # (never listed twice)
    return rows[0] if rows else None


def test_a_python_process_on_a_gpu_without_a_channel_is_listed_with_how_to_inject(shm_dir, capsys):
    job = start([sys.executable, "-c", WAITING])
    other = start(["sleep", "120"])  # holds a GPU too, but is no Python: no probe goes in it
    try:
        lines = ls(capsys, nvml([[job.pid, other.pid, 4242], [job.pid]]))  # (4242: no such process here)
    finally:
        for p in (job, other):
            p.kill()
            p.wait()
    assert lines[0] == "no tuimon channels of yours are open"
    assert lines[2] == "your Python processes on a GPU without the probe:", lines
    assert lines[3].split() == ["PID", "GPU", "COMMAND", "TO", "PUT", "THE", "PROBE", "IN"]
    row = row_of(lines, job.pid)
    assert row is not None and row.split()[1] == "0,1" and f"{os.path.basename(sys.executable)} -c" in row, lines
    assert row.endswith(f"tuimon attach {job.pid} --inject"), row
    assert row_of(lines, other.pid) is None and row_of(lines, 4242) is None, lines


def test_a_process_with_a_channel_is_listed_once_and_so_is_its_job(shm_dir, capsys):
    """This process has a channel: listed with it, not again below; its Python child on a GPU is a
    worker of that job (no channel of its own), not a job to put a probe in."""
    w = SegmentWriter.create(JobMeta(argv=("python", "train.py")), 64)
    L.U64.pack_into(w._mm, L.OFF_HEARTBEAT_NS, time.monotonic_ns())
    worker = start([sys.executable, "-c", WAITING])
    try:
        lines = ls(capsys, nvml([[os.getpid(), worker.pid]]))
    finally:
        worker.kill()
        worker.wait()
    assert lines[0].split()[:2] == ["PID", "STATE"] and row_of(lines, os.getpid()).split()[1] == "alive", lines
    assert "--inject" not in "\n".join(lines) and row_of(lines, worker.pid) is None, lines


def test_another_users_python_process_is_not_listed(shm_dir, capsys):
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run a process as another user")
    job = start(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable, "-c", WAITING])
    try:
        lines = ls(capsys, nvml([[job.pid]]))
    finally:
        job.kill()
        job.wait()
    assert lines == ["no tuimon channels of yours are open"]


def test_without_nvml_ls_lists_the_channels_alone_and_says_nothing_more(shm_dir, capsys):
    fake = FakeNvml()
    fake.fail["nvmlInit"] = 12  # NVML_ERROR_LIBRARY_NOT_FOUND
    assert ls(capsys, DeviceSampler(fake)) == ["no tuimon channels of yours are open"]
    fake = FakeNvml()
    fake.fail["nvmlDeviceGetComputeRunningProcesses"] = 3  # NVML_ERROR_NOT_SUPPORTED: a GPU's list unread
    assert ls(capsys, DeviceSampler(fake)) == ["no tuimon channels of yours are open"]
    p = subprocess.run(tuimon_cmd("ls"), capture_output=True, text=True, timeout=60)  # (this machine's NVML, if any)
    assert p.returncode == 0 and p.stderr == "" and p.stdout.startswith("no tuimon channels of yours are open\n")
