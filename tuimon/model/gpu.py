"""One GPU's sample: device activity (GPM where the GPU has it, coarse utilization otherwise),
memory, power, clocks, throttle reasons and the GPU's processes."""

from __future__ import annotations

from dataclasses import field

from .record import record
from .values import NA

Num = float | int | NA

NOT_READ = NA("not read")
GPM_FIELDS = ("sm_active", "sm_occupancy", "tensor_active", "fp32_active", "fp16_active", "dram_bw",
              "pcie_tx", "pcie_rx", "nvlink_rx", "nvlink_tx")


@record
class GpuProcess:
    pid: int
    gpu_mem: int | None = None  # bytes
    sm_util: int | None = None  # % of SM time over NVML's last sampling interval (None: no sample landed)
    mem_util: int | None = None
    name: str | None = None  # from psutil, where this user can see the process
    user: str | None = None
    command: str | None = None


@record
class GpuSample:
    index: int
    t: int = 0  # CLOCK_MONOTONIC ns
    name: str | NA = NOT_READ
    gpm: bool = False
    lost: NA | None = None  # the whole GPU failed: nothing else in this sample is read
    # GPM (Hopper and newer): % of SMs busy, of warps resident, of time in tensor / FP32 / FP16
    # math, of peak DRAM bandwidth; PCIe and NVLink in bytes/s.
    sm_active: Num = NOT_READ
    sm_occupancy: Num = NOT_READ
    tensor_active: Num = NOT_READ
    fp32_active: Num = NOT_READ
    fp16_active: Num = NOT_READ
    dram_bw: Num = NOT_READ
    pcie_tx: Num = NOT_READ
    pcie_rx: Num = NOT_READ
    nvlink_rx: Num = NOT_READ
    nvlink_tx: Num = NOT_READ
    # Without GPM: nvmlDeviceGetUtilizationRates, kept under its own (coarse) name.
    util_gpu: Num = NOT_READ
    util_mem: Num = NOT_READ
    mem_used: Num = NOT_READ  # bytes (NVML memory info v2, as nvidia-smi counts it)
    mem_total: Num = NOT_READ
    power_w: Num = NOT_READ
    power_limit_w: Num = NOT_READ
    temp_c: Num = NOT_READ
    sm_clock_mhz: Num = NOT_READ
    sm_clock_max_mhz: Num = NOT_READ
    clock_events: list[str] | NA = NOT_READ  # throttle reasons in words
    processes: list[GpuProcess] | NA = NOT_READ
    uses_target: bool | None = None  # None: no target to look for
    errors: list[str] = field(default_factory=list)  # NVML calls that failed this cycle: "field: reason"
