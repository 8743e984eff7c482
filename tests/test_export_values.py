"""The exporter's values against the recordings they come from, exactly: each series is the
recording's number in Prometheus' base units (a % as a ratio, ms as seconds, MHz as hertz), so a
scale or a field mixed up fails here (issue 42 item 10: the values were checked as ratios and
+-50% ranges); and the exporter's own decisions (the rate after a quiet spell, the exit code of a
signal, throttled or not) on both sides of their edges."""

from tests.conftest import ROOT
from tests.test_export import samples
from tuimon.export.metrics import families, steps_per_second
from tuimon.model import Cycle, ProcessSample, TrainingSnapshot
from tuimon.monitor.state import MonitorState
from tuimon.ui.replay_frames import state_from_recording

# the last frame of tests/fixtures/h100_demo_v2.jsonl (the demo loop on an H100: input-bound)
H100 = {
    "tuimon_data_wait_ratio": 0.5953,
    "tuimon_gpu_dram_active_ratio{gpu=0}": 0.165688885,
    "tuimon_gpu_fp32_active_ratio{gpu=0}": 0.007846984,
    "tuimon_gpu_idle_ratio": 0.6758,
    "tuimon_gpu_memory_total_bytes{gpu=0}": 85520809984.0,
    "tuimon_gpu_memory_used_bytes{gpu=0}": 3750559744.0,
    "tuimon_gpu_power_limit_watts{gpu=0}": 700.0,
    "tuimon_gpu_power_watts{gpu=0}": 290.271,
    "tuimon_gpu_sm_active_ratio{gpu=0}": 0.329549826,
    "tuimon_gpu_sm_clock_hertz{gpu=0}": 1980000000.0,
    "tuimon_gpu_sm_clock_max_hertz{gpu=0}": 1980000000.0,
    "tuimon_gpu_sm_occupancy_ratio{gpu=0}": 0.236988216,
    "tuimon_gpu_step_time_seconds": 0.022489,
    "tuimon_gpu_temperature_celsius{gpu=0}": 41.0,
    "tuimon_gpu_tensor_active_ratio{gpu=0}": 0.054774131,
    "tuimon_gpu_throttled{gpu=0}": 0.0,
    "tuimon_gpu_used_by_job{gpu=0}": 1.0,
    "tuimon_phase_ratio{phase=backward}": 0.0703,
    "tuimon_phase_ratio{phase=data}": 0.5953,
    "tuimon_phase_ratio{phase=forward}": 0.0425,
    "tuimon_phase_ratio{phase=optimizer}": 0.0117,
    "tuimon_phase_ratio{phase=other}": 0.051,
    "tuimon_phase_ratio{phase=sync}": 0.2293,
    "tuimon_process_cpu_ratio": 1.83,
    "tuimon_process_resident_memory_bytes": 2312052736.0,
    "tuimon_process_up": 1.0,
    "tuimon_records_dropped_total": 0.0,
    "tuimon_step_time_mean_seconds": 0.025688,
    "tuimon_step_time_seconds{quantile=0.5}": 0.022707,
    "tuimon_step_time_seconds{quantile=0.95}": 0.046072,
    "tuimon_step_time_seconds{quantile=0.99}": 0.048819,
    "tuimon_steps_per_second": 38.929,
    "tuimon_steps_total": 1269.0,
    "tuimon_syncs_per_step": 1.0,
    "tuimon_throughput_per_second{counter=samples}": 9965.787,
    "tuimon_torch_alloc_retries_total": 0.0,
    "tuimon_torch_allocated_bytes": 87048704.0,
    "tuimon_torch_peak_allocated_bytes": 1443898880.0,
    "tuimon_torch_reserved_bytes": 2946498560.0,
}
# the last frame of tests/fixtures/h200x2_ddp_straggler.jsonl (two DDP ranks, rank 1 the straggler)
DDP = {
    "tuimon_comm_ratio": 0.431,
    "tuimon_data_wait_ratio": 0.0358,
    "tuimon_gpu_dram_active_ratio{gpu=0}": 0.040835375,
    "tuimon_gpu_dram_active_ratio{gpu=1}": 0.042800568,
    "tuimon_gpu_fp32_active_ratio{gpu=0}": 0.020358231,
    "tuimon_gpu_fp32_active_ratio{gpu=1}": 0.020369055,
    "tuimon_gpu_idle_ratio": 0.1532,
    "tuimon_gpu_memory_total_bytes{gpu=0}": 150754820096.0,
    "tuimon_gpu_memory_total_bytes{gpu=1}": 150754820096.0,
    "tuimon_gpu_memory_used_bytes{gpu=0}": 3907911680.0,
    "tuimon_gpu_memory_used_bytes{gpu=1}": 3907911680.0,
    "tuimon_gpu_power_limit_watts{gpu=0}": 700.0,
    "tuimon_gpu_power_limit_watts{gpu=1}": 700.0,
    "tuimon_gpu_power_watts{gpu=0}": 196.345,
    "tuimon_gpu_power_watts{gpu=1}": 189.958,
    "tuimon_gpu_sm_active_ratio{gpu=0}": 0.222400292,
    "tuimon_gpu_sm_active_ratio{gpu=1}": 0.075271871,
    "tuimon_gpu_sm_clock_hertz{gpu=0}": 1980000000.0,
    "tuimon_gpu_sm_clock_hertz{gpu=1}": 1980000000.0,
    "tuimon_gpu_sm_clock_max_hertz{gpu=0}": 1980000000.0,
    "tuimon_gpu_sm_clock_max_hertz{gpu=1}": 1980000000.0,
    "tuimon_gpu_sm_occupancy_ratio{gpu=0}": 0.063438262,
    "tuimon_gpu_sm_occupancy_ratio{gpu=1}": 0.025130214,
    "tuimon_gpu_step_time_seconds": 0.036095,
    "tuimon_gpu_temperature_celsius{gpu=0}": 37.0,
    "tuimon_gpu_temperature_celsius{gpu=1}": 39.0,
    "tuimon_gpu_tensor_active_ratio{gpu=0}": 8.974e-06,
    "tuimon_gpu_tensor_active_ratio{gpu=1}": 8.979e-06,
    "tuimon_gpu_throttled{gpu=0}": 0.0,
    "tuimon_gpu_throttled{gpu=1}": 0.0,
    "tuimon_gpu_used_by_job{gpu=0}": 1.0,
    "tuimon_gpu_used_by_job{gpu=1}": 1.0,
    "tuimon_phase_ratio{phase=backward}": 0.0658,
    "tuimon_phase_ratio{phase=comm}": 0.0118,
    "tuimon_phase_ratio{phase=data}": 0.0358,
    "tuimon_phase_ratio{phase=forward}": 0.0218,
    "tuimon_phase_ratio{phase=optimizer}": 0.006,
    "tuimon_phase_ratio{phase=other}": 0.0279,
    "tuimon_phase_ratio{phase=sync}": 0.8309,
    "tuimon_process_cpu_ratio": 1.9980000000000002,
    "tuimon_process_resident_memory_bytes": 3430584320.0,
    "tuimon_process_up": 1.0,
    "tuimon_rank_comm_ratio{rank=0}": 0.8407,
    "tuimon_rank_comm_ratio{rank=1}": 0.0214,
    "tuimon_rank_data_wait_ratio{rank=0}": 0.0358,
    "tuimon_rank_data_wait_ratio{rank=1}": 0.0354,
    "tuimon_rank_own_work_seconds{rank=0}": 0.00577,
    "tuimon_rank_own_work_seconds{rank=1}": 0.035441,
    "tuimon_rank_step_time_seconds{quantile=0.5,rank=0}": 0.03615,
    "tuimon_rank_step_time_seconds{quantile=0.95,rank=0}": 0.037978,
    "tuimon_rank_step_time_seconds{quantile=0.5,rank=1}": 0.036135,
    "tuimon_rank_step_time_seconds{quantile=0.95,rank=1}": 0.037439,
    "tuimon_rank_up{rank=0}": 1.0,
    "tuimon_rank_up{rank=1}": 1.0,
    "tuimon_records_dropped_total": 0.0,
    "tuimon_step_time_mean_seconds": 0.036212,
    "tuimon_step_time_seconds{quantile=0.5}": 0.03615,
    "tuimon_step_time_seconds{quantile=0.95}": 0.037978,
    "tuimon_step_time_seconds{quantile=0.99}": 0.038493,
    "tuimon_steps_per_second": 27.615,
    "tuimon_steps_total": 419.0,
    "tuimon_straggler_ratio{rank=1}": 6.661,
    "tuimon_syncs_per_step": 1.0,
    "tuimon_torch_alloc_retries_total": 0.0,
    "tuimon_torch_allocated_bytes": 1142196224.0,
    "tuimon_torch_peak_allocated_bytes": 2218331648.0,
    "tuimon_torch_reserved_bytes": 2237661184.0,
}


def series(view) -> dict[str, float]:
    """{'name{label=value,...}': value}, without the job's pid, rank and the GPU's name (the same on
    every series of one job) but with the rank of per-rank series; not the verdict or the sources."""
    out = {}
    for (name, *labels), value in samples(view).items():
        if name in ("tuimon_verdict", "tuimon_source_up"):
            continue
        per_rank = name.startswith(("tuimon_rank", "tuimon_straggler"))
        kept = ",".join(f"{k}={v}" for k, v in labels if k not in ("pid", "name", "rank") or (k == "rank" and per_rank))
        out[f"{name}{{{kept}}}" if kept else name] = value
    return out


def test_the_h100_recording_exactly():
    view = state_from_recording(str(ROOT / "tests" / "fixtures" / "h100_demo_v2.jsonl")).view()
    assert series(view) == H100


def test_the_ddp_recording_exactly():
    view = state_from_recording(str(ROOT / "tests" / "fixtures" / "h200x2_ddp_straggler.jsonl")).view()
    assert series(view) == DDP


def rate(since_s: float, window_steps: int = 100, steps_per_s: float = 40.0, longest_ms: float = 30.0,
         state: str = "alive") -> float | None:
    return steps_per_second(TrainingSnapshot(pid=1, state=state, steps=500, window_steps=window_steps,
                                             steps_per_s=steps_per_s, since_step_s=since_s, longest_step_ms=longest_ms))


def test_the_rate_holds_through_its_windows_span_or_the_stall_bar_then_is_0():
    # 100 steps at 40/s span 2.5 s (under the 20 s floor of the stall bar)
    assert rate(2.5) == 40.0 and rate(2.51) == 0.0
    # 1000 steps at 10/s span 100 s: the stall bar decides, 5x a 1 s step is under the 20 s floor
    assert rate(20.0, window_steps=1000, steps_per_s=10.0, longest_ms=1000.0) == 10.0
    assert rate(20.01, window_steps=1000, steps_per_s=10.0, longest_ms=1000.0) == 0.0
    # no window: the stall bar alone, 5x the longest step (5 s) = 25 s
    assert rate(25.0, window_steps=0, longest_ms=5000.0) == 40.0 and rate(25.01, window_steps=0, longest_ms=5000.0) == 0.0
    assert rate(99.0, state="exited") == 40.0  # (an exited job's rate is not served: metrics.job_ended)
    assert rate(99.0, steps_per_s=0.0) == 0.0


def exit_code_served(code: int) -> float:
    state = MonitorState()
    state.apply(Cycle(t=1, process=ProcessSample(pid=1, alive=False, exit_code=code, procs=[])))
    [value] = [s.value for fam in families(state.view()) for s in fam.samples if s.name == "tuimon_job_exit_code"]
    return value


def test_an_exit_code_as_a_shell_says_it():
    assert [exit_code_served(c) for c in (0, 1, 255, -1, -15)] == [0, 1, 255, 129, 143]


def test_the_sources_served_with_no_job_and_with_one():
    def sources(state) -> dict[str, float]:
        return {dict(k[1:])["source"]: v for k, v in samples(state.view()).items() if k[0] == "tuimon_source_up"}

    assert sources(MonitorState()) == {"nvml": 0.0}  # (no job watched: no process, no channel)
    state = MonitorState()
    state.apply(Cycle(t=1, process=ProcessSample(pid=1, procs=[])))
    assert sources(state)["process"] == 1.0
    h100 = state_from_recording(str(ROOT / "tests" / "fixtures" / "h100_demo_v2.jsonl"))
    assert sources(h100) == {"nvml": 1.0, "process": 1.0, "channel": 1.0}


def test_a_gpu_is_throttled_for_any_reason_but_idle():
    from tuimon.model import GpuSample

    def gpu_series(**kw) -> dict[str, float]:
        state = MonitorState()
        state.apply(Cycle(t=1, gpus=[GpuSample(index=0, name="G", **kw)]))
        return {name: v for (name, *_), v in samples(state.view()).items() if name.startswith("tuimon_gpu")}

    assert gpu_series(clock_events=["GPU idle"])["tuimon_gpu_throttled"] == 0.0
    assert gpu_series(clock_events=["GPU idle", "SW power cap"])["tuimon_gpu_throttled"] == 1.0
    assert gpu_series(clock_events=[])["tuimon_gpu_throttled"] == 0.0
    coarse = gpu_series(util_gpu=37.0, uses_target=False)
    assert coarse["tuimon_gpu_utilization_coarse_ratio"] == 0.37 and coarse["tuimon_gpu_used_by_job"] == 0.0


def test_a_channel_that_failed_this_cycle_is_down_with_its_reason():
    h100 = state_from_recording(str(ROOT / "tests" / "fixtures" / "h100_demo_v2.jsonl"))
    h100.apply(Cycle(t=10**6, process=ProcessSample(pid=465, procs=[]), problems={"channel": "segment gone"}))
    up = {dict(k[1:])["source"]: (dict(k[1:])["reason"], v) for k, v in samples(h100.view()).items()
          if k[0] == "tuimon_source_up"}
    assert up["channel"] == ("segment gone", 0.0)
