"""The monitor's view as Prometheus metric families, in Prometheus' conventions: base units
(seconds, bytes, watts, hertz, ratios 0..1), `_total` for counters, one family per quantity with
labels for what varies (gpu, phase, quantile). Pure: a View in, families out; what could not be
read is left out (Prometheus has no 'n/a': an absent series is the honest answer), and
`tuimon_source_up` says which source is missing and why.

Once the job's process has exited, its gauges (rates, shares) are no longer served (Prometheus
marks them stale, so graphs end where the job ended); `tuimon_process_up 0`, the counters' final
values, the verdict (`exited` 1), how it ended (`tuimon_job_end_info`, `tuimon_job_exit_code`) and,
with a baseline, `tuimon_regression` (1 unless it ended cleanly) stay. A rank that exited: only
`tuimon_rank_up 0`.

`tuimon_steps_per_second` is the rate over the window of the last steps while steps come; once no
step has completed for longer than that window's span or the stall bar, whichever is shorter, it is
0: no window of that length ending now holds a step (a hang read 43 steps/s, its last window's)."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..analysis import thresholds as T
from ..analysis.stall import limit_s
from ..model import NA, TrainingSnapshot
from ..model.vocab import VERDICT_CODES
from ..monitor.state import View


def _num(v: float | NA | None) -> float | None:
    return None if v is None or isinstance(v, NA) or isinstance(v, bool) else float(v)


class _Families:
    """Families keyed by name, each made on first use with its help text and label names."""

    def __init__(self) -> None:
        self.by_name: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}

    def add(self, name: str, doc: str, labels: dict[str, str], value: float | NA | None, counter: bool = False,
            scale: float = 1.0) -> None:
        v = _num(value)
        if v is None:
            return
        fam = self.by_name.get(name)
        if fam is None:
            kind = CounterMetricFamily if counter else GaugeMetricFamily
            fam = self.by_name[name] = kind(name, doc, labels=list(labels))
        fam.add_metric(list(labels.values()), round(v * scale, 9) if scale != 1.0 else v)


GPU_GAUGES = (  # (metric, field, scale, help)
    ("tuimon_gpu_sm_active_ratio", "sm_active", 0.01, "Share of SMs with a warp resident, averaged over the last interval (NVML GPM)"),
    ("tuimon_gpu_sm_occupancy_ratio", "sm_occupancy", 0.01, "Resident warps over the maximum (NVML GPM)"),
    ("tuimon_gpu_tensor_active_ratio", "tensor_active", 0.01, "Share of time the tensor pipes were busy (NVML GPM)"),
    ("tuimon_gpu_fp32_active_ratio", "fp32_active", 0.01, "Share of time the FP32 pipes were busy (NVML GPM)"),
    ("tuimon_gpu_dram_active_ratio", "dram_bw", 0.01, "DRAM bandwidth used, of peak (NVML GPM)"),
    ("tuimon_gpu_utilization_coarse_ratio", "util_gpu", 0.01,
     "Share of time any kernel ran (nvmlDeviceGetUtilizationRates; GPUs without GPM): not SM activity"),
    ("tuimon_gpu_memory_used_bytes", "mem_used", 1.0, "GPU memory used, as nvidia-smi counts it"),
    ("tuimon_gpu_memory_total_bytes", "mem_total", 1.0, "GPU memory in total"),
    ("tuimon_gpu_power_watts", "power_w", 1.0, "Board power draw"),
    ("tuimon_gpu_power_limit_watts", "power_limit_w", 1.0, "Enforced power limit"),
    ("tuimon_gpu_temperature_celsius", "temp_c", 1.0, "GPU temperature"),
    ("tuimon_gpu_sm_clock_hertz", "sm_clock_mhz", 1e6, "SM clock"),
    ("tuimon_gpu_sm_clock_max_hertz", "sm_clock_max_mhz", 1e6, "SM clock's maximum"),
)


def families(view: View) -> list[Metric]:
    """(No host label: Prometheus labels every series with the target it scraped, `instance`.)"""
    f = _Families()
    _sources(f, view)
    for g in view.gpus:
        s = g.latest
        labels = {"gpu": str(s.index), "name": s.name if isinstance(s.name, str) else ""}
        if s.lost is not None:
            continue
        for metric, field, scale, doc in GPU_GAUGES:
            f.add(metric, doc, labels, getattr(s, field), scale=scale)
        f.add("tuimon_gpu_throttled", "1 while the GPU's clocks are held down for a reason other than idle",
              labels, None if isinstance(s.clock_events, NA) else int(any(e != "GPU idle" for e in s.clock_events)))
        f.add("tuimon_gpu_used_by_job", "1 for a GPU the monitored job's processes use", labels,
              None if s.uses_target is None else int(s.uses_target))
    _job(f, view)
    return list(f.by_name.values())


SOURCE_UP = "tuimon_source_up"
SOURCE_DOC = ("1 while tuimon reads this source (nvml: the GPUs; process: the job's process tree; channel: what "
              "the job's probe publishes), 0 with the reason why not")


def _sources(f: _Families, view: View) -> None:
    """nvml always; process and channel when a job is watched (a PID was given)."""
    gpu_problem = view.problems.get("gpu")
    _source(f, "nvml", bool(view.gpus) and gpu_problem is None,
            gpu_problem or (view.gpu_note if not view.gpus else None) or ("no GPU sampled yet" if not view.gpus else ""))
    if view.process is not None or "process" in view.problems:
        _source(f, "process", view.process is not None and "process" not in view.problems,
                view.problems.get("process", ""))
    if view.channel is not None:
        channel_problem = view.problems.get("channel") or (view.channel.reason if isinstance(view.channel, NA) else None)
        _source(f, "channel", view.training is not None and "channel" not in view.problems, channel_problem or "")


def _source(f: _Families, source: str, up: bool, reason: str) -> None:
    f.add(SOURCE_UP, SOURCE_DOC, {"source": source, "reason": "" if up else reason[:200]}, int(up))


def job_ended(view: View) -> bool:
    """The process shown (or the process tree asked for) has exited: its numbers are its last."""
    t, p = view.training, view.process
    return (t is not None and t.state != "alive") or (p is not None and not p.alive)


def _job(f: _Families, view: View) -> None:
    t = view.training
    p = view.process
    ended = job_ended(view)
    if p is not None:
        labels = {"pid": str(p.pid)}
        f.add("tuimon_process_up", "1 while the monitored process runs", labels, int(bool(p.alive)))
        if p.alive:
            f.add("tuimon_process_cpu_ratio", "CPU of the job's processes, in cores (1.0 = one core busy)", labels,
                  None if (cpu := _num(p.cpu_percent)) is None else cpu / 100)
            f.add("tuimon_process_resident_memory_bytes", "RSS of the job's processes, summed (shared pages counted "
                  "per process)", labels, p.rss)
    if t is None:
        if p is not None and ended:
            _ended(f, view, {"pid": str(p.pid), "rank": ""})
        return
    labels = {"pid": str(t.pid), "rank": "" if t.rank is None else str(t.rank)}
    f.add("tuimon_steps_total", "Steps the job has finished", labels, t.steps, counter=True)
    f.add("tuimon_records_dropped_total", "Channel records overwritten before the monitor read them", labels,
          t.dropped, counter=True)
    if ended:
        _ended(f, view, labels)
        return _ranks_up(f, view)
    f.add("tuimon_steps_per_second", "Steps per second over the window of the last steps; 0 once no step has "
          "completed for longer than that window's span or the stall bar", labels, steps_per_second(t))
    if t.state == "alive":
        f.add("tuimon_seconds_since_last_step", "Time since the loop's last step ended (a stall grows it)", labels,
              t.since_step_s)
        if view.stall is not None:
            f.add("tuimon_stall_limit_seconds", "A stall is named past this: 5x the longest step so far, at least 20 s",
                  labels, view.stall.limit_s)
    if t.step_time_ms is not None:
        f.add("tuimon_step_time_mean_seconds", "Mean step time over the window (the last steps): 1 / steps per second, "
              "what the job pays per step", labels, t.step_time_ms.mean, scale=1e-3)
        for q, v in (("0.5", t.step_time_ms.p50), ("0.95", t.step_time_ms.p95), ("0.99", t.step_time_ms.p99)):
            f.add("tuimon_step_time_seconds", "Step time over the window (the last steps), by quantile",
                  {**labels, "quantile": q}, v, scale=1e-3)
    f.add("tuimon_data_wait_ratio", "Share of step time the loop waited for the next batch", labels,
          t.data_wait_share)
    for ph in t.phases:
        f.add("tuimon_phase_ratio", "Share of step time in each phase (they add up to the step)",
              {**labels, "phase": ph.name}, ph.share)
    for name, per_s in t.throughput_per_s.items():
        f.add("tuimon_throughput_per_second", "The job's own counters (tuimon.count) per second",
              {**labels, "counter": name}, per_s)
    if t.gpu is not None:
        f.add("tuimon_gpu_idle_ratio", "At most this share of step time the GPU had no work queued (CUDA events)",
              labels, t.gpu.idle_share)
        f.add("tuimon_gpu_step_time_seconds", "Median GPU time between step boundaries (CUDA events)", labels,
              t.gpu.step_ms, scale=1e-3)
        f.add("tuimon_gpu_step_time_mean_seconds", "Mean GPU time between step boundaries (CUDA events), beside "
              "tuimon_step_time_mean_seconds", labels, t.gpu.step_mean_ms, scale=1e-3)
    if t.syncs is not None:
        f.add("tuimon_syncs_per_step", "Device-to-host syncs per step", labels, t.syncs.per_step)
    if t.memory is not None:
        for metric, n_bytes, doc in (
                ("tuimon_torch_allocated_bytes", t.memory.allocated, "Caching allocator: allocated"),
                ("tuimon_torch_reserved_bytes", t.memory.reserved, "Caching allocator: reserved"),
                ("tuimon_torch_peak_allocated_bytes", t.memory.peak_allocated, "Caching allocator: peak")):
            f.add(metric, doc, labels, n_bytes)
        f.add("tuimon_torch_alloc_retries_total", "cudaMalloc retries after emptying the cache", labels,
              t.memory.alloc_retries, counter=True)
        f.add("tuimon_torch_alloc_retries_per_step", f"Caching allocator retries per step over the window (memory "
              f"pressure from {T.MEMORY_RETRIES.show()})", labels, t.memory.retries_per_step)
        f.add("tuimon_torch_inactive_split_bytes", "Caching allocator: reserved bytes in split blocks not in use "
              "(fragmentation)", labels, t.memory.inactive_split)
        f.add("tuimon_torch_memory_capacity_bytes", "What the caching allocator may use: the job's per-process cap, "
              "else the device's memory", labels, t.memory.capacity)
    _ranks(f, view, labels)
    _verdict(f, view, labels)
    _baseline(f, view, labels)


def steps_per_second(t: TrainingSnapshot) -> float | None:
    """The rate over the window of the last steps, or 0 once the loop has gone without a step for
    longer than that window's span (its steps over their rate) or the stall bar, whichever is
    shorter: a rate that held through a hang said the job ran at its last window's speed."""
    rate = t.steps_per_s
    if not rate or t.since_step_s is None or t.state != "alive":
        return rate
    span_s = t.window_steps / rate if t.window_steps else 0.0
    quiet_after = min(span_s, limit_s(t.longest_step_ms)) if span_s > 0 else limit_s(t.longest_step_ms)
    return 0.0 if t.since_step_s > quiet_after else rate


def _verdict(f: _Families, view: View, labels: dict[str, str]) -> None:
    code = view.verdict.code
    for c in VERDICT_CODES:  # a state set: exactly one is 1
        f.add("tuimon_verdict", "The diagnosis: 1 for the current verdict", {**labels, "verdict": c}, int(c == code))


def _ended(f: _Families, view: View, labels: dict[str, str]) -> None:
    """A job that exited: its verdict (exited), how it ended and, against a baseline, whether that
    fails it (anything but a clean end does)."""
    _verdict(f, view, labels)
    end = view.job_end
    if end is not None:
        f.add("tuimon_job_end_info", "1 once the job ended: how (exception, exit code, signal, clean, unknown) and "
              "why, in words (its exit code or signal, the exception's last line)",
              {**labels, "how": end.how, "cause": end.headline[:200]}, 1)
        code = end.exit_code
        f.add("tuimon_job_exit_code", "The job's exit code where tuimon started it (128+N: killed by signal N, as a "
              "shell says it)", labels, None if code is None else code if code >= 0 else 128 - code)
    c = view.baseline
    if c is not None and c.regressed:
        f.add("tuimon_regression", REGRESSION_DOC, labels, 1)


def _ranks(f: _Families, view: View, labels: dict[str, str]) -> None:
    """The job's time in collectives; with 2+ ranks on this node, one series per rank, and the
    slowest rank's own work over the others' (whether or not it is past the straggler bar)."""
    t = view.training
    share = view.comm_share if view.ranks else (t.comm.share if t is not None and t.comm else None)
    f.add("tuimon_comm_ratio", "Share of step time waiting in collectives (the ranks' mean on this node)", labels, share)
    _ranks_up(f, view)
    for r in view.ranks:
        if r.state != "alive":
            continue
        rl = {"pid": str(r.pid), "rank": "" if r.rank is None else str(r.rank)}
        for q, v in (("0.5", r.step_p50_ms), ("0.95", r.step_p95_ms)):
            f.add("tuimon_rank_step_time_seconds", "Each rank's step time over its window, by quantile",
                  {**rl, "quantile": q}, v, scale=1e-3)
        f.add("tuimon_rank_own_work_seconds", "Each rank's step less its waits in collectives (mean)", rl, r.own_ms,
              scale=1e-3)
        f.add("tuimon_rank_comm_ratio", "Share of each rank's step waiting in collectives", rl, r.comm_share)
        f.add("tuimon_rank_data_wait_ratio", "Share of each rank's step waiting for batches", rl, r.data_wait_share)
    s = view.straggler
    if s is not None:
        f.add("tuimon_straggler_ratio", f"The slowest rank's own work over the other ranks' median (a straggler "
              f"from {T.STRAGGLER.show()})", {"pid": str(s.pid), "rank": "" if s.rank is None else str(s.rank)},
              s.ratio)


def _ranks_up(f: _Families, view: View) -> None:
    for r in view.ranks:
        f.add("tuimon_rank_up", "1 while the rank's process runs, 0 once it exited (until its rank comes back)",
              {"pid": str(r.pid), "rank": "" if r.rank is None else str(r.rank)}, int(r.state == "alive"))


REGRESSION_DOC = (f"1 while the job is measurably slower than its baseline (mean step time {T.REGRESSION_FACTOR.show()} "
                  f"and a Welch t-test on batch means at {T.REGRESSION_P.show()}), its peak memory grew "
                  f"{T.PEAK_MEMORY_FACTOR.show()}, or it makes no progress (stalled, or ended other than cleanly)")


def _baseline(f: _Families, view: View, labels: dict[str, str]) -> None:
    """Only with --baseline. While the step time is collecting (no decision yet), no step time
    ratio; tuimon_regression is there once anything is decided (a peak memory that grew is)."""
    c = view.baseline
    if c is None:
        return
    f.add("tuimon_baseline_step_time_seconds", "The baseline's mean step time", labels, c.baseline_mean_ms, scale=1e-3)
    if c.peak_memory is not None:
        f.add("tuimon_baseline_peak_memory_ratio", f"Peak allocated (caching allocator) over the baseline's (a "
              f"regression from {T.PEAK_MEMORY_FACTOR.show()})", labels, c.peak_memory.ratio)
    if c.state == "collecting" and not c.regressed:
        return
    f.add("tuimon_regression", REGRESSION_DOC, labels, int(c.regressed))
    if c.state == "collecting":
        return
    f.add("tuimon_baseline_step_time_ratio", "Mean step time of the recent steps over the baseline's (1.3: 30% "
          "slower, 30% fewer steps per second)", labels, c.ratio)
    for d in c.phases:
        f.add("tuimon_phase_delta_seconds", "Time per step of each phase minus the baseline's (which phase grew)",
              {**labels, "phase": d.name}, d.delta_ms, scale=1e-3)
