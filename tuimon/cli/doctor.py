"""`tuimon doctor`: what works on this machine and what does not, each with the fix."""

from __future__ import annotations

import glob
import importlib.util
import os
import subprocess
from collections.abc import Iterator
from typing import TYPE_CHECKING, TypeAlias

from ..capture.nsys import find_nsys
from ..channel import layout as L
from ..channel import procinfo
from ..channel.paths import shm_dir

if TYPE_CHECKING:
    import argparse

Check: TypeAlias = tuple[bool | None, str, str, str]  # (ok: True, False or None for a warning; what; detail; fix)


def _nvml_checks() -> Iterator[Check]:
    try:
        import pynvml as nvml
    except ImportError:
        yield False, "NVML", "pynvml is not installed", "pip install nvidia-ml-py"
        return
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        yield False, "NVML", f"cannot initialise: {e}", \
            "install the NVIDIA driver (libnvidia-ml.so.1); in a container, expose the GPU (--gpus all)"
        return
    try:
        drv = nvml.nvmlSystemGetDriverVersion()
        lib = nvml.nvmlSystemGetNVMLVersion()
        yield True, "NVML", f"driver {drv}, NVML {lib}", ""
        n = nvml.nvmlDeviceGetCount()
        yield n > 0, "GPUs", f"{n} visible", "" if n else "no GPU visible: check CUDA_VISIBLE_DEVICES / --gpus"
        for i in range(n):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            name = nvml.nvmlDeviceGetName(h)
            try:
                gpm = bool(nvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
            except nvml.NVMLError:
                gpm = False
            yield True if gpm else None, f"GPU {i} GPM", \
                f"{name}: " + ("SM, tensor and DRAM activity available" if gpm else
                               "no GPM: only coarse utilization (kernel-busy time, memory-controller busy)"), \
                "" if gpm else "GPM needs a Hopper or newer GPU and a recent driver"
    finally:
        nvml.nvmlShutdown()


def _nsys_checks() -> Iterator[Check]:
    nsys = find_nsys()
    if not nsys:
        yield None, "Nsight Systems", "nsys not found; captures will use torch.profiler", \
            "install Nsight Systems, or put its nsys on PATH"
        return
    try:
        ver = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        yield False, "Nsight Systems", f"{nsys} does not run: {e}", "reinstall Nsight Systems"
        return
    yield True, "Nsight Systems", f"{nsys} ({ver})", ""
    # The importer lies beside nsys or in a sibling folder (host/linux-desktop-*/ in some bundles).
    top = os.path.dirname(os.path.dirname(os.path.realpath(nsys)))
    importers = glob.glob(os.path.join(top, "**", "QdstrmImporter"), recursive=True)
    if not importers:
        yield None, "nsys reports", "QdstrmImporter not found beside nsys: cannot tell", ""
        return
    ldd = subprocess.run(["ldd", importers[0]], capture_output=True, text=True).stdout
    missing = sorted({line.split()[0] for line in ldd.splitlines() if "not found" in line})
    if missing:
        yield False, "nsys reports", f"captures stop at .qdstrm: its importer lacks {', '.join(missing)}", \
            "install them (Debian: libdw1 libelf1) or add their folder to LD_LIBRARY_PATH"
    else:
        yield True, "nsys reports", "the importer's libraries are all found: .nsys-rep reports can be written", ""


def _shm_checks() -> Iterator[Check]:
    d = shm_dir()
    if not os.path.isdir(d):
        yield False, "channel folder", f"{d} does not exist", "set TUIMON_SHM_DIR to a tmpfs folder you can write"
        return
    ok = os.access(d, os.W_OK)
    st = os.statvfs(d)
    free = st.f_bavail * st.f_frsize
    need = L.segment_size(L.DEFAULT_RING_RECORDS)
    yield ok and free >= need, "channel folder", \
        f"{d}: {'writable' if ok else 'NOT writable'}, {free / 2**20:.0f} MiB free, {need / 2**20:.1f} MiB per process", \
        "" if ok and free >= need else "free space in /dev/shm (docker: --shm-size) or set TUIMON_SHM_DIR"


def _probe_checks() -> Iterator[Check]:
    from ..channel import ring

    if ring.IMPLEMENTATION == "c":
        yield True, "probe hot path", "C extension (benchmarks/probe_overhead.py measures it)", ""
    else:
        yield None, "probe hot path", f"pure Python, several times slower per range: {ring.C_UNAVAILABLE}", \
            "unset TUIMON_PURE_PYTHON, or reinstall tuimon where a C compiler and Python headers exist"


def _proc_checks() -> Iterator[Check]:
    import psutil

    try:  # (by hand: psutil does not read kernel settings)
        scope = procinfo.read_file("/proc/sys/kernel/yama/ptrace_scope").decode().strip()
    except OSError:
        scope = "n/a"
    try:
        mounts = psutil.disk_partitions(all=True)
    except OSError:  # (no mount table: nothing says it hides processes; the access check below still tells)
        mounts = []
    hidden = any(m.mountpoint == "/proc" and "hidepid=" in m.opts for m in mounts)
    readable = os.access("/proc/1/status", os.R_OK)
    yield (not hidden) and readable, "other processes", \
        f"/proc {'hides other users’ processes (hidepid)' if hidden else 'shows all processes'}; ptrace_scope {scope}", \
        "" if not hidden else "remount /proc without hidepid, or run tuimon as the job's user"
    has_torch = importlib.util.find_spec("torch") is not None
    yield True if has_torch else None, "torch", "importable (for the demo workload and jobs)" if has_torch else \
        "not installed here: `tuimon demo` needs it", "" if has_torch else "pip install torch"


def run_doctor() -> int:
    rows: list[Check] = []
    for group in (_nvml_checks, _nsys_checks, _shm_checks, _probe_checks, _proc_checks):
        try:
            rows.extend(group())
        except Exception as e:  # noqa: BLE001 - a check that breaks is itself a finding
            rows.append((False, group.__name__.strip("_").replace("_checks", ""), f"check failed: {e}", ""))
    mark = {True: "ok  ", False: "FAIL", None: "warn"}
    for ok, what, detail, fix in rows:
        print(f"[{mark[ok]}] {what:<16} {detail}")
        if fix:
            print(f"       {'':<16} fix: {fix}")
    return 1 if any(row[0] is False for row in rows) else 0


def cmd_doctor(args: argparse.Namespace) -> int:
    return run_doctor()
