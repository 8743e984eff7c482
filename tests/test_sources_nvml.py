"""The NVML sampler's logic at the pynvml boundary: values, GPM, and every failure as a value."""

import pynvml

from tests.fake_nvml import FakeNvml
from tuimon.model import NA, GpuProcess, is_na, num
from tuimon.sources.nvml import CONTAINER_HINT, DeviceSampler, decode_clock_events, target_note


def test_gpm_gpu_first_sample_then_metrics():
    fake = FakeNvml()
    s = DeviceSampler(fake, target_pids={4242})
    first = s.sample()[0]
    assert first.sm_active == NA("first sample")  # GPM needs two samples
    x = s.sample()[0]
    assert (x.sm_active, x.sm_occupancy, x.tensor_active, x.dram_bw) == (97.0, 40.0, 88.0, 35.0)
    assert (x.fp32_active, x.fp16_active) == (12.0, 6.0)
    assert x.pcie_rx == 20 * 2**20 and x.nvlink_tx == 0.0  # MiB/s -> bytes/s
    assert x.power_w == 612.345 and x.power_limit_w == 700.0
    assert x.mem_used == 40 * 2**30 and x.mem_total == 141 * 2**30  # v2: reserved excluded
    assert (x.temp_c, x.sm_clock_mhz, x.sm_clock_max_mhz) == (61, 1755, 1980)
    assert x.clock_events == ["GPU idle", "software power cap"]
    assert x.processes == [GpuProcess(pid=4242, gpu_mem=3 * 2**30, sm_util=71, mem_util=30)]
    assert x.uses_target is True and is_na(x.util_gpu) and x.errors == []
    assert "nvmlDeviceGetPcieThroughput" not in fake.calls  # blocks ~20 ms: never in the loop


def test_gpu_without_gpm_reports_coarse_utilization_as_such():
    s = DeviceSampler(FakeNvml(gpm=False))
    x = s.sample()[0]
    assert (x.util_gpu, x.util_mem) == (100, 42)
    assert is_na(x.sm_active) and "needs GPM" in x.sm_active.reason


def test_one_failing_field_is_one_unavailable_value():
    fake = FakeNvml()
    fake.fail["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    fake.fail["nvmlDeviceGetComputeRunningProcesses"] = pynvml.NVML_ERROR_NO_PERMISSION
    x = DeviceSampler(fake).sample()[0]
    assert x.power_w == NA("Not Supported")
    assert x.processes == NA("Insufficient Permissions")
    assert num(x.temp_c) == 61 and num(x.mem_used) is not None
    # a failure other than "not supported" is also listed, for the screen to say what failed
    assert x.errors == ["processes: Insufficient Permissions"]


def test_gpm_failure_mid_run_and_unsupported_metric():
    fake = FakeNvml()
    del fake.gpm_values[60]
    s = DeviceSampler(fake)
    s.sample()
    x = s.sample()[0]
    assert is_na(x.nvlink_rx) and x.sm_active == 97.0
    fake.fail["nvmlGpmMetricsGet"] = pynvml.NVML_ERROR_UNKNOWN
    x = s.sample()[0]
    assert is_na(x.sm_active) and num(x.power_w) is not None and x.errors == ["GPM metrics: Unknown Error"]


def test_a_lost_gpu_is_marked_and_the_others_go_on():
    fake = FakeNvml(gpus=2)
    s = DeviceSampler(fake)
    real_temp = fake.nvmlDeviceGetTemperature

    def temp(h, sensor):
        if h == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return real_temp(h, sensor)

    fake.nvmlDeviceGetTemperature = temp
    a, b = s.sample()
    assert a.lost is None and num(a.temp_c) == 61
    assert b.lost == NA("GPU is lost") and b.name == "NVIDIA H200"


def test_no_nvml_library_is_an_error_message_not_a_crash():
    fake = FakeNvml()
    fake.fail["nvmlInit"] = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    s = DeviceSampler(fake)
    assert s.error == "NVML unavailable: NVML Shared Library Not Found" and s.sample() == []
    fake = FakeNvml()
    fake.fail["nvmlInit"] = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    assert "Driver Not Loaded" in DeviceSampler(fake).error


def test_the_real_pynvml_on_a_machine_without_a_gpu():
    s = DeviceSampler()  # real pynvml: on CI there is no libnvidia-ml
    if s.devices:
        return  # a GPU machine: tests/gpu covers it
    assert s.error and s.sample() == []


def test_no_gpu_and_handle_failure():
    assert DeviceSampler(FakeNvml(gpus=0)).error == "NVML sees no GPU"
    fake = FakeNvml()
    fake.fail["nvmlDeviceGetHandleByIndex"] = pynvml.NVML_ERROR_NO_PERMISSION
    [x] = DeviceSampler(fake).sample()
    assert x.lost == NA("Insufficient Permissions")


def test_target_not_found_says_why():
    fake = FakeNvml()
    s = DeviceSampler(fake, target_pids={999})
    samples = s.sample()
    assert samples[0].uses_target is False
    assert target_note(samples, {999}) == CONTAINER_HINT and "--pid=host" in CONTAINER_HINT
    s.target_pids = {4242}
    assert target_note(s.sample(), {4242}) is None


def test_clock_event_words():
    assert decode_clock_events(0) == []
    assert decode_clock_events(0x4 | 0x40 | 0x80) == ["software power cap", "hardware thermal slowdown",
                                                      "hardware power brake"]


def test_memory_v1_fallback_when_the_driver_lacks_v2():
    fake = FakeNvml()
    fake.fail["nvmlDeviceGetMemoryInfo_v2"] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    x = DeviceSampler(fake).sample()[0]
    assert x.mem_used == 40 * 2**30 + 600 * 2**20
