"""Where the step goes, in one line with its evidence. Pure: numbers in, words out.

Anchors: TensorBoard's input-pipeline analysis calls an input share of step time >= 5% moderate
and >= 20% high. GPU-bound means the SMs are busy (GPM SM activity, or the coarse kernel-busy
utilization where GPM is missing, which overstates it: a GPU running one tiny kernel is 100%
"utilized")."""

from __future__ import annotations

from dataclasses import dataclass

MIN_STEPS = 5
INPUT_HIGH, INPUT_MODERATE = 0.20, 0.05
GPU_BUSY, GPU_IDLE = 80.0, 50.0


@dataclass(frozen=True)
class Verdict:
    code: str  # 'waiting' | 'input-bound' | 'gpu-bound' | 'host-bound' | 'mixed'
    headline: str
    evidence: str


def verdict(steps: int, data_wait_share: float | None, gpu_busy: float | None,
            gpu_busy_is_coarse: bool = False) -> Verdict:
    """steps: completed steps in the window; gpu_busy: % (SM activity, or the coarse kernel-busy
    utilization when gpu_busy_is_coarse) over the same time, None when no GPU is known."""
    if steps < MIN_STEPS or data_wait_share is None:
        return Verdict("waiting", "not enough data yet",
                       f"{steps} step{'s' if steps != 1 else ''} seen; a verdict needs {MIN_STEPS}")
    wait = f"data wait {data_wait_share:.0%} of step time"
    label = "GPU util (coarse)" if gpu_busy_is_coarse else "SM activity"
    gpu = f"{label} {gpu_busy:.0f}%" if gpu_busy is not None else "no GPU metrics"
    if data_wait_share >= INPUT_HIGH:
        return Verdict("input-bound", "input-bound", f"{wait} (>= 20% is high) · {gpu}")
    if gpu_busy is not None and gpu_busy >= GPU_BUSY:
        return Verdict("gpu-bound", "GPU-bound", f"{gpu} · {wait}")
    if data_wait_share >= INPUT_MODERATE:
        return Verdict("input-bound", "input-bound (moderate)", f"{wait} (>= 5% is moderate) · {gpu}")
    if gpu_busy is not None and gpu_busy < GPU_IDLE:
        return Verdict("host-bound", "host-bound",
                       f"{gpu} with {wait}: the GPU waits on Python, launches or syncs")
    return Verdict("mixed", "no single bottleneck", f"{gpu} · {wait}")
