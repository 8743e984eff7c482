"""A stand-in for the pynvml module, for machines without a GPU (CI). Only the boundary is
fake: it uses the real package's error class, constants and ctypes structs, and each call can
be made to fail with a real NVML error code. The same sampler code runs against the real
library in tests/gpu/."""

from types import SimpleNamespace

import pynvml as real


class FakeNvml:
    NVMLError = real.NVMLError
    NVML_CLOCK_SM = real.NVML_CLOCK_SM
    NVML_TEMPERATURE_GPU = real.NVML_TEMPERATURE_GPU
    NVML_ERROR_GPU_IS_LOST = real.NVML_ERROR_GPU_IS_LOST
    NVML_ERROR_NOT_SUPPORTED = real.NVML_ERROR_NOT_SUPPORTED
    NVML_GPM_METRICS_GET_VERSION = real.NVML_GPM_METRICS_GET_VERSION
    nvmlMemory_v2 = real.nvmlMemory_v2
    c_nvmlGpmMetricsGet_t = real.c_nvmlGpmMetricsGet_t

    def __init__(self, gpus=1, gpm=True):
        self.gpus, self.gpm = gpus, gpm
        self.fail: dict[str, int] = {}  # function name -> NVML error code it raises
        self.calls: list[str] = []
        self.gpm_values = {2: 97.0, 3: 40.0, 5: 88.0, 12: 12.0, 13: 6.0, 10: 35.0, 20: 10.0, 21: 20.0, 60: 0.0,
                           61: 0.0}
        self.processes = [SimpleNamespace(pid=4242, usedGpuMemory=3 * 2**30)]
        self.throttle = 0x4 | 0x1

    def __getattr__(self, name):
        raise AttributeError(name)

    def _call(self, name, value):
        self.calls.append(name)
        if name in self.fail:
            raise real.NVMLError(self.fail[name])
        return value

    def nvmlInit(self):
        return self._call("nvmlInit", None)

    def nvmlShutdown(self):
        return self._call("nvmlShutdown", None)

    def nvmlDeviceGetCount(self):
        return self._call("nvmlDeviceGetCount", self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self._call("nvmlDeviceGetHandleByIndex", i)

    def nvmlDeviceGetName(self, h):
        return self._call("nvmlDeviceGetName", "NVIDIA H200" if self.gpm else "Tesla T4")

    def nvmlDeviceGetUUID(self, h):
        return self._call("nvmlDeviceGetUUID", f"GPU-{h}")

    def nvmlGpmQueryDeviceSupport(self, h):
        return self._call("nvmlGpmQueryDeviceSupport", SimpleNamespace(isSupportedDevice=int(self.gpm)))

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        return self._call("nvmlDeviceGetMaxClockInfo", 1980)

    def nvmlDeviceGetClockInfo(self, h, clock):
        return self._call("nvmlDeviceGetClockInfo", 1755)

    def nvmlDeviceGetUtilizationRates(self, h):
        return self._call("nvmlDeviceGetUtilizationRates", SimpleNamespace(gpu=100, memory=42))

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        name = "nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo"
        used = 40 * 2**30 if version else 40 * 2**30 + 600 * 2**20  # v1 counts reserved memory
        return self._call(name, SimpleNamespace(used=used, total=141 * 2**30))

    def nvmlDeviceGetPowerUsage(self, h):
        return self._call("nvmlDeviceGetPowerUsage", 612_345)

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._call("nvmlDeviceGetEnforcedPowerLimit", 700_000)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._call("nvmlDeviceGetTemperature", 61)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._call("nvmlDeviceGetCurrentClocksEventReasons", self.throttle)

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return self._call("nvmlDeviceGetComputeRunningProcesses", self.processes)

    def nvmlDeviceGetProcessUtilization(self, h, ts):
        return self._call("nvmlDeviceGetProcessUtilization",
                          [SimpleNamespace(pid=p.pid, smUtil=71, memUtil=30, timeStamp=ts + 1) for p in self.processes])

    def nvmlDeviceGetPcieThroughput(self, h, counter):
        return self._call("nvmlDeviceGetPcieThroughput", 0)

    def nvmlGpmSampleAlloc(self):
        return self._call("nvmlGpmSampleAlloc", real.c_nvmlGpmSample_t())

    def nvmlGpmSampleGet(self, h, smp):
        return self._call("nvmlGpmSampleGet", smp)

    def nvmlGpmSampleFree(self, smp):
        return self._call("nvmlGpmSampleFree", None)

    def nvmlGpmMetricsGet(self, req):
        self._call("nvmlGpmMetricsGet", None)
        for k in range(req.numMetrics):
            m = req.metrics[k]
            if m.metricId in self.gpm_values:
                m.value, m.nvmlReturn = self.gpm_values[m.metricId], 0
            else:
                m.nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
        return req
