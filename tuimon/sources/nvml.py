"""NVML device sampler: one sample per GPU per cycle, each field a value or {"na": reason}.

On GPUs with GPM (Hopper and later) the activity fields come from nvmlGpmMetricsGet over the
previous and the current sample: SM activity, SM occupancy, tensor activity, DRAM bandwidth, PCIe
and NVLink bytes/s. Elsewhere only nvmlDeviceGetUtilizationRates is read, and it is reported as
what it is (util_gpu: time a kernel ran; util_mem: memory-controller busy time), not renamed.

Cost rules (H200s): a GPM call took 0.02-0.04 ms on one host (benchmarks/sampler_cost.py) and
4-10 ms on another, so the sampler runs on its own thread (poller.py); nvmlDeviceGetPcieThroughput
blocks ~20 ms and is never called here (GPM gives PCIe where it exists); nvmlDeviceGetProcessUtilization costs ~2.7 ms on an H100 and is read every
5 s. Static fields are read once, slow ones cached with a time-to-live.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from ..model import NA, GpuProcess, GpuSample

# GPM metric ids (nvml.h) -> sample field, scale to our unit.
MIB = 1024 * 1024
GPM_FIELDS = {
    2: ("sm_active", 1.0),  # NVML_GPM_METRIC_SM_UTIL: % of SMs busy
    3: ("sm_occupancy", 1.0),  # NVML_GPM_METRIC_SM_OCCUPANCY: % of max warps resident
    5: ("tensor_active", 1.0),  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    12: ("fp32_active", 1.0),  # NVML_GPM_METRIC_FP32_UTIL: % of time in non-tensor FP32 math
    13: ("fp16_active", 1.0),  # NVML_GPM_METRIC_FP16_UTIL
    10: ("dram_bw", 1.0),  # NVML_GPM_METRIC_DRAM_BW_UTIL: % of peak DRAM bandwidth
    20: ("pcie_tx", MIB),  # NVML_GPM_METRIC_PCIE_TX_PER_SEC (MiB/s) -> bytes/s
    21: ("pcie_rx", MIB),
    60: ("nvlink_rx", MIB),  # NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC
    61: ("nvlink_tx", MIB),
}

CLOCK_EVENTS = {  # nvmlClocksEventReason* bits, in words
    0x1: "GPU idle",
    0x2: "application clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
    0x100: "display clock setting",
    0x200: "board limit",
    0x400: "reliability",
}

SLOW_TTL_S = 10.0  # power limit and the like change rarely
PROCESS_UTIL_S = 5.0  # per-process SM shares: read this often (see _process_utilization)
CONTAINER_HINT = (
    "the target is not among this GPU's processes: it may not have created a CUDA context yet, "
    "or tuimon runs in a container that sees other PIDs than the host's (NVML reports host PIDs; "
    "run with the host PID namespace, e.g. docker --pid=host)"
)


def decode_clock_events(mask: int) -> list[str]:
    return [word for bit, word in CLOCK_EVENTS.items() if mask & bit]


def _err(nvml: Any, e: Exception) -> NA:
    if isinstance(e, nvml.NVMLError):
        return NA(str(e) or f"NVML error {getattr(e, 'value', '?')}")
    return NA(f"{type(e).__name__}: {e}")


class _Lost(Exception):
    """The whole GPU is gone (NVML_ERROR_GPU_IS_LOST): the sample becomes `lost`."""

    def __init__(self, na: NA) -> None:
        self.na = na


class DeviceSampler:
    """All GPUs of this machine. `nvml` is the pynvml module (a test passes one whose calls
    fail). Never raises from sample(): failures are values, and a failed call other than 'not
    supported' is also listed in the sample's `errors` so the screen can say what failed."""

    def __init__(self, nvml: Any = None, target_pids: Iterable[int] | None = None) -> None:
        self.error: str | None = None  # why no GPU can be sampled at all
        if nvml is None:
            try:
                import pynvml

                nvml = pynvml
            except ImportError as e:  # nvidia-ml-py not installed
                nvml = None
                self.error = f"pynvml is not installed ({e}): pip install nvidia-ml-py"
        self.nvml = nvml
        self.target_pids: set[int] = set(target_pids or ())
        self.devices: list[dict] = []  # static facts per GPU
        self._handles: list = []
        self._gpm_prev: dict[int, object] = {}
        self._proc_ts: dict[int, int] = {}
        self._proc_util: dict[int, tuple[float, dict]] = {}  # GPU -> (when read, pid -> (SM %, mem %))
        self._slow: dict[tuple, tuple[float, object]] = {}
        self._no_mem_v2 = False
        if self.nvml is not None:
            self._open()

    # -- setup ------------------------------------------------------------------------------------

    def _open(self) -> None:
        nvml = self.nvml
        try:
            nvml.nvmlInit()
        except Exception as e:  # noqa: BLE001 - no library, no driver, no permission
            self.error = f"NVML unavailable: {_err(nvml, e).reason}"
            return
        try:
            count = nvml.nvmlDeviceGetCount()
        except Exception as e:  # noqa: BLE001
            self.error = f"NVML cannot count GPUs: {_err(nvml, e).reason}"
            return
        if count == 0:
            self.error = "NVML sees no GPU"
        for i in range(count):
            try:
                h = nvml.nvmlDeviceGetHandleByIndex(i)
            except Exception as e:  # noqa: BLE001
                self.devices.append({"index": i, "lost": _err(nvml, e)})
                self._handles.append(None)
                continue
            self._handles.append(h)
            errors: list[str] = []
            try:
                self.devices.append({
                    "index": i,
                    "name": self._read(errors, "name", nvml.nvmlDeviceGetName, h),
                    "gpm": self._gpm_supported(h),
                    "sm_clock_max_mhz": self._read(errors, "sm_clock_max_mhz", nvml.nvmlDeviceGetMaxClockInfo, h,
                                                   nvml.NVML_CLOCK_SM),
                })
            except _Lost as e:
                self.devices.append({"index": i, "lost": e.na})
                self._handles[-1] = None

    def _read(self, errors: list[str], field: str, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args), or NA(reason) when it fails; a failure other than 'not supported' is also
        listed in errors. A lost GPU raises _Lost."""
        nvml = self.nvml
        try:
            v = fn(*args)
            return v.decode() if isinstance(v, bytes) else v
        except Exception as e:  # noqa: BLE001
            value = getattr(e, "value", None)
            if value == getattr(nvml, "NVML_ERROR_GPU_IS_LOST", -1):
                raise _Lost(_err(nvml, e)) from None
            na = _err(nvml, e)
            if value != getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", -1):
                errors.append(f"{field}: {na.reason}")
            return na

    def _gpm_supported(self, h: Any) -> bool:
        try:
            return bool(self.nvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
        except Exception:  # noqa: BLE001 - old driver or library: no GPM
            return False

    def _cached(self, key: tuple[Any, ...], ttl: float, errors: list[str], field: str, fn: Callable[..., Any],
                *args: Any) -> Any:
        now = time.monotonic()
        hit = self._slow.get(key)
        if hit and now - hit[0] < ttl:
            return hit[1]
        v = self._read(errors, field, fn, *args)
        self._slow[key] = (now, v)
        return v

    # -- one cycle --------------------------------------------------------------------------------

    def sample(self) -> list[GpuSample]:
        """One sample per GPU (an empty list when NVML is unavailable: see self.error)."""
        out = []
        for dev, h in zip(self.devices, self._handles, strict=True):
            t = time.monotonic_ns()
            if h is None:
                out.append(GpuSample(index=dev["index"], t=t, lost=dev["lost"]))
                continue
            try:
                out.append(self._sample_device(dev, h, t))
            except _Lost as e:
                out.append(GpuSample(index=dev["index"], t=t, name=dev["name"], gpm=dev["gpm"], lost=e.na))
            except Exception as e:  # noqa: BLE001 - one GPU's trouble stays its own
                out.append(GpuSample(index=dev["index"], t=t, name=dev["name"], gpm=dev["gpm"],
                                     lost=_err(self.nvml, e)))
        return out

    def _sample_device(self, dev: dict, h: Any, t: int) -> GpuSample:
        nvml, i = self.nvml, dev["index"]
        errors: list[str] = []

        def read(field: str, fn: Callable[..., Any], *args: Any) -> Any:
            return self._read(errors, field, fn, *args)

        s: dict = {"index": i, "t": t, "name": dev["name"], "gpm": dev["gpm"], "errors": errors}
        if dev["gpm"]:
            s.update(self._gpm(i, h, errors))
            s["util_gpu"] = s["util_mem"] = NA("GPM GPU: see SM activity")
        else:
            util = read("util_gpu", nvml.nvmlDeviceGetUtilizationRates, h)
            s["util_gpu"] = util if isinstance(util, NA) else util.gpu
            s["util_mem"] = util if isinstance(util, NA) else util.memory
            for field, _ in GPM_FIELDS.values():
                s[field] = NA("needs GPM (Hopper or newer); see util_gpu / util_mem")
        mem = self._memory(h, errors)
        s["mem_used"] = mem if isinstance(mem, NA) else mem.used
        s["mem_total"] = mem if isinstance(mem, NA) else mem.total
        power = read("power_w", nvml.nvmlDeviceGetPowerUsage, h)
        s["power_w"] = power if isinstance(power, NA) else power / 1000.0
        limit = self._cached(("limit", i), SLOW_TTL_S, errors, "power_limit_w", nvml.nvmlDeviceGetEnforcedPowerLimit, h)
        s["power_limit_w"] = limit if isinstance(limit, NA) else limit / 1000.0
        s["temp_c"] = read("temp_c", nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU)
        s["sm_clock_mhz"] = read("sm_clock_mhz", nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM)
        s["sm_clock_max_mhz"] = dev["sm_clock_max_mhz"]
        s["clock_events"] = self._clock_events(h, errors)
        s["processes"] = procs = self._processes(i, h, errors)
        if isinstance(procs, list) and self.target_pids:
            s["uses_target"] = any(p.pid in self.target_pids for p in procs)
        return GpuSample(**s)

    def _memory(self, h: Any, errors: list[str]) -> Any:
        """Memory info v2, whose `used` leaves out driver-reserved memory as nvidia-smi does
        (v1's counted ~600 MiB more on an H200); v1 where the driver lacks v2."""
        nvml = self.nvml
        v2 = getattr(nvml, "nvmlMemory_v2", None)
        if v2 is not None and not self._no_mem_v2:
            mem = self._read([], "memory", nvml.nvmlDeviceGetMemoryInfo, h, v2)
            if not isinstance(mem, NA):
                return mem
            self._no_mem_v2 = True
        return self._read(errors, "memory", nvml.nvmlDeviceGetMemoryInfo, h)

    def _gpm(self, i: int, h: Any, errors: list[str]) -> dict:
        nvml = self.nvml
        out: dict = {}
        try:
            cur = nvml.nvmlGpmSampleAlloc()
            nvml.nvmlGpmSampleGet(h, cur)
        except Exception as e:  # noqa: BLE001
            v = _err(nvml, e)
            errors.append(f"GPM sample: {v.reason}")
            return {field: v for field, _ in GPM_FIELDS.values()}
        prev = self._gpm_prev.get(i)
        self._gpm_prev[i] = cur
        if prev is None:  # metrics need two samples: the first cycle has none yet
            return {field: NA("first sample") for field, _ in GPM_FIELDS.values()}
        try:
            req = nvml.c_nvmlGpmMetricsGet_t()
            req.version = nvml.NVML_GPM_METRICS_GET_VERSION
            req.numMetrics = len(GPM_FIELDS)
            req.sample1, req.sample2 = prev, cur
            for k, mid in enumerate(GPM_FIELDS):
                req.metrics[k].metricId = mid
            nvml.nvmlGpmMetricsGet(req)
            for k, (mid, (field, scale)) in enumerate(GPM_FIELDS.items()):
                m = req.metrics[k]
                if m.metricId != mid or m.nvmlReturn != 0:
                    out[field] = NA(f"GPM metric {mid}: NVML error {m.nvmlReturn}")
                else:
                    out[field] = m.value * scale
        except Exception as e:  # noqa: BLE001
            v = _err(nvml, e)
            errors.append(f"GPM metrics: {v.reason}")
            out = {field: v for field, _ in GPM_FIELDS.values()}
        finally:
            try:
                nvml.nvmlGpmSampleFree(prev)
            except Exception:  # noqa: BLE001
                pass
        return out

    def _clock_events(self, h: Any, errors: list[str]) -> list[str] | NA:
        nvml = self.nvml
        fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        mask = self._read(errors, "clock_events", fn, h)
        return mask if isinstance(mask, NA) else decode_clock_events(mask)

    def _processes(self, i: int, h: Any, errors: list[str]) -> list[GpuProcess] | NA:
        """GPU processes with their memory and (when NVML has samples) SM/memory shares."""
        nvml = self.nvml
        procs = self._read(errors, "processes", nvml.nvmlDeviceGetComputeRunningProcesses, h)
        if isinstance(procs, NA):
            return procs
        mem = {p.pid: getattr(p, "usedGpuMemory", None) for p in procs}
        util = self._process_utilization(i, h)
        rows = []
        for pid, m in sorted(mem.items()):
            sm, mem_util = util.get(pid, (None, None))
            rows.append(GpuProcess(pid=pid, gpu_mem=m if isinstance(m, int) else None, sm_util=sm,
                                   mem_util=mem_util))
        return rows

    def _process_utilization(self, i: int, h: Any) -> dict[int, tuple[int, int]]:
        """pid -> (SM %, memory %), the mean of NVML's per-process samples since the last read.
        Read every PROCESS_UTIL_S: the call costs ~2.7 ms on an H100 (nearly all of a GPU's
        sample), and NVML keeps the samples in between, so nothing is lost by reading less often."""
        now = time.monotonic()
        cached = self._proc_util.get(i)
        if cached is not None and now - cached[0] < PROCESS_UTIL_S:
            return cached[1]
        sums: dict[int, list[int]] = {}
        try:
            for smp in self.nvml.nvmlDeviceGetProcessUtilization(h, self._proc_ts.get(i, 0)):
                row = sums.setdefault(smp.pid, [0, 0, 0])
                row[0] += smp.smUtil
                row[1] += smp.memUtil
                row[2] += 1
                self._proc_ts[i] = max(self._proc_ts.get(i, 0), smp.timeStamp)
        except Exception:  # noqa: BLE001 - NOT_FOUND: no new samples since last time
            pass
        util = {pid: (round(sm / n), round(mm / n)) for pid, (sm, mm, n) in sums.items()}
        self._proc_util[i] = (now, util)
        return util

    def compute_pids(self) -> dict[int, list[int]]:
        """pid -> the GPUs (NVML indices) where it holds a compute context
        (nvmlDeviceGetComputeRunningProcesses): `tuimon ls`. A GPU whose list cannot be read is left
        out; without NVML, nothing (self.error says why)."""
        out: dict[int, set[int]] = {}
        for dev, h in zip(self.devices, self._handles, strict=True):
            if h is None:
                continue
            try:
                procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(h)
            except Exception:  # noqa: BLE001 - a lost GPU, an old driver: its processes are not listed
                continue
            for p in procs:
                out.setdefault(p.pid, set()).add(dev["index"])
        return {pid: sorted(gpus) for pid, gpus in sorted(out.items())}

    def close(self) -> None:
        for prev in self._gpm_prev.values():
            try:
                self.nvml.nvmlGpmSampleFree(prev)
            except Exception:  # noqa: BLE001
                pass
        self._gpm_prev.clear()
        if self.nvml is not None and not self.error:
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass


def target_note(samples: list[GpuSample], target_pids: set[int]) -> str | None:
    """Why the target may be missing from every GPU's process list, or None if it is found."""
    if not target_pids or not samples:
        return None
    if any(s.uses_target for s in samples):
        return None
    return CONTAINER_HINT
