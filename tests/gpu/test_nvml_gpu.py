"""The NVML sampler on a real GPU; skipped where NVML finds none (CI)."""

import subprocess
import sys
import time

import pytest

from tuimon.model import num
from tuimon.sources.nvml import DeviceSampler

sampler = DeviceSampler()
pytestmark = pytest.mark.skipif(bool(sampler.error) or not sampler.devices,
                                reason=f"no GPU: {sampler.error}")


def test_every_field_is_a_value_or_a_reason():
    sampler.sample()
    time.sleep(0.2)
    for s in sampler.sample():
        assert s.lost is None and s.errors == []
        for field in ("mem_used", "mem_total", "power_w", "power_limit_w", "temp_c", "sm_clock_mhz"):
            assert num(getattr(s, field)) is not None, (field, getattr(s, field))
        # v2 memory leaves out driver-reserved memory: an idle GPU uses 0 bytes
        assert 0 <= s.mem_used <= s.mem_total and 0 < s.power_w <= 1.5 * s.power_limit_w
        fields = ("sm_active", "tensor_active", "fp32_active", "dram_bw") if s.gpm else ("util_gpu", "util_mem")
        for field in fields:
            assert num(getattr(s, field)) is not None, (field, getattr(s, field))
        assert isinstance(s.clock_events, list) and isinstance(s.processes, list)


def test_hopper_has_gpm():
    for dev in sampler.devices:
        if any(k in str(dev["name"]) for k in ("H100", "H200", "H800", "GH200", "B200")):
            assert dev["gpm"]


def test_finds_a_cuda_process_by_pid():
    code = "import torch, time; x = torch.ones(1, device='cuda'); print('up', flush=True); time.sleep(20)"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "up"
        sampler.target_pids = {p.pid}
        s = sampler.sample()
        assert any(x.uses_target for x in s)
        row = next(r for x in s for r in x.processes if r.pid == p.pid)
        assert row.gpu_mem is None or row.gpu_mem > 0
    finally:
        p.kill()
        p.wait()
