"""Every threshold the diagnosis uses, in one place, each with where it comes from. None of them
was fitted to tuimon's own test loops: they are the anchors published by the tools people
already read (TensorBoard, DCGM, Nsight Compute, SageMaker Debugger)."""

from __future__ import annotations

from ..model.record import record


@record(kw_only=False)
class Threshold:
    value: float
    unit: str  # '' for a share of step time (0..1), '%' for a percentage, 'points' (of a %), 'steps', 's',
    # 'batches', 'reads', 'x' (a factor), 'p' (a p-value), 'R²' (a line's fit)
    source: str

    def show(self) -> str:
        if self.unit == "":
            return f"{self.value:.0%}"
        if self.unit == "x":
            return f"{self.value:.3g}x"
        if self.unit == "p":
            return f"p < {self.value:g}"
        if self.unit == "R²":
            return f"{self.value:g}"
        return f"{self.value:g}{'' if self.unit == '%' else ' '}{self.unit}"


MIN_STEPS = Threshold(5, "steps", "tuimon: fewer steps than this in the window are anecdotes, not a distribution")
INPUT_HIGH = Threshold(0.20, "", "TensorBoard Profiler, input-pipeline analysis: input >= 20% of step time is "
                                 "'highly input-bound'")
INPUT_MODERATE = Threshold(0.05, "", "TensorBoard Profiler, input-pipeline analysis: input >= 5% of step time is "
                                     "'moderately input-bound'")
COPY_HIGH = Threshold(0.20, "", "TensorBoard Profiler's input-pipeline analysis counts host-to-device transfer in a "
                                "step's input time, and input >= 20% of step time is 'highly input-bound'")
SYNC_HIGH = Threshold(0.20, "", "TensorBoard's input anchors, applied to the loop's other wait: time blocked in "
                                "device-to-host syncs is time the loop cannot issue work, as a data wait is")
SYNC_MODERATE = Threshold(0.05, "", "as above, TensorBoard's 'moderate' anchor")
GPU_BUSY = Threshold(80, "%", "DCGM profiling metrics (SM activity): 'a value of 0.8 or greater is necessary, but "
                              "not sufficient, for effective use of the GPU'")
GPU_IDLE = Threshold(50, "%", "DCGM profiling metrics (SM activity): 'a value less than 0.5 likely indicates "
                              "ineffective GPU usage'")
UNIT_BOUND = Threshold(60, "%", "Nsight Compute's SOLBottleneck rule: compute and memory throughput both below 60% "
                                "of peak indicate latency issues; a unit at or above it can be the limiter")
UNIT_LEAD = Threshold(10, "points", "Nsight Compute's SOLBottleneck rule: compute and memory within 10 points of each "
                               "other are 'well-balanced'")
LOOP_CPU_BUSY = Threshold(90, "%", "SageMaker Debugger's CPUBottleneck rule: CPU above 90% is high utilization "
                                   "(here: of the one core the loop's thread can use)")
LOOP_BLOCKED_SAMPLES = Threshold(0.5, "", "py-spy's idle detection (a sample is idle when the OS says the thread "
                                         "is not running: `--idle` shows them, left out by default) taken as a "
                                         "majority of the loop thread's samples outside the model: a thread under "
                                         "LOOP_CPU_BUSY whose own samples there are mostly running (Python, or a "
                                         "native call on a CPU) computes; its CPU over the window also counts the "
                                         "time it waited for the GIL. In the data phase: a loop whose samples "
                                         "there are mostly running takes ready batches in rather than waiting "
                                         "for them to be made")
WORKERS_BUSY = Threshold(90, "%", "as above, for each DataLoader worker process")
STRAGGLER = Threshold(1 / 0.7, "x", "NVIDIA Resiliency Extension's straggler detection: a rank whose relative "
                                    "performance score is below 0.7 (its default gpu_relative_perf_threshold) is a "
                                    "straggler, i.e. its time is 1/0.7 = 1.43x the reference's (here: the median "
                                    "of the other ranks, not the fastest one, so one fast outlier flags nobody)")
RANK_FACTOR = Threshold(INPUT_HIGH.value / INPUT_MODERATE.value, "x",
                        "TensorBoard Profiler's input-pipeline analysis puts 'highly input-bound' (20%) at 4x "
                        "'moderately' (5%): a share 4x a moderate one is as far past it as high is past moderate, "
                        "so the larger share is the one to fix first (Amdahl's law: removing a 9% wait speeds the "
                        "step up 1.1x at most, while a part 4x larger holds 36% or more of it)")
MODEL_MAJORITY = Threshold(0.5, "", "tuimon: more than half the step: the model's compute (forward, backward, "
                                    "optimizer) is then larger than all the rest of the step together, so no other "
                                    "part could speed the step up as much (Amdahl's law)")
INTRA_OP_IDLE = Threshold(50, "%", "tuimon: the process's threads besides the loop's use under half a core: its ops "
                                   "run on the loop thread alone (intra-op threads would each add up to a core)")
COMM_HIGH = Threshold(0.10, "", "PyTorch Profiler's TensorBoard plugin (distributed view): more than 10% of the step "
                                "in communication is 'high time cost on communication'")
# torch.nn.DataParallel (tuimon/probe/data_parallel.py, analysis/verdicts/data_parallel.py).
DP_DEVICES = Threshold(2, "GPUs", "torch.nn.DataParallel's forward on one device calls the module itself: no replicas, "
                                  "no scatter or gather (torch/nn/parallel/data_parallel.py)")
DP_OWN = Threshold(COMM_HIGH.value, "", "PyTorch Profiler's TensorBoard plugin (distributed view): more than 10% of the "
                                        "step in communication is 'high time cost on communication' (as COMM_HIGH): "
                                        "replicate, scatter and gather are DataParallel's communication (the parameters "
                                        "broadcast to every GPU, the inputs scattered from the first and the outputs "
                                        "gathered to it), done by the loop thread every step")

# Stalls (tuimon/analysis/stall.py).
STALL_FACTOR = Threshold(5, "x", "NVIDIA Resiliency Extension's fault tolerance: a hang timeout is the longest "
                                 "interval observed between a rank's heartbeats times its safety_factor, 5.0 by "
                                 "default; here the heartbeat is the step")
STALL_FLOOR = Threshold(20, "s", "tuimon: longer than the pauses a healthy job makes before its own history shows "
                                 "them (a first checkpoint write of ~10 s, an epoch's DataLoader workers starting), "
                                 "short enough to name a hang within 30 s; after one long pause a job's own bar rises "
                                 "(the factor above)")
STALL_WARMUP_STEPS = Threshold(5, "steps", "NVIDIA Resiliency Extension's fault tolerance: num_warmup_iterations = 5, "
                                           "the first iterations are not used to set the hang timeouts (they run "
                                           "slower: compilation, autotuning, workers starting)")
STALL_IDLE_CPU = Threshold(10, "%", "tuimon: a thread below a tenth of a core is waiting, not computing (a blocked "
                                    "read, a lock, a sleep); a thread computing reads near 100%")

# Hot lines (probe/sampler.py).
HOT_MIN_SAMPLES = Threshold(20, "samples", "the binomial error of a share measured from n samples is at most "
                                           "1/(2 sqrt(n)): 0.11 at 20 samples, the issue's bar for a hot line's share "
                                           "(within 0.1 of the loop's own timers); fewer samples name no line")

OP_HOST_US = Threshold(5, "us", "the least host time an eager op on the GPU costs: a kernel launch alone is a few "
                                "microseconds (NVIDIA, 'Getting Started with CUDA Graphs', 2019: 3.8 us a kernel in "
                                "a launch-bound loop, 2.9 us from a graph), and PyTorch's dispatcher adds its own; "
                                "ops outside the model whose count times this is half or more of that time are the "
                                "time (launches), whatever the sampler saw the thread doing between them")
OP_HOST_MAX_US = Threshold(25, "us", "the most host time an eager op on the GPU costs: ~5-25 us of CPU-side work "
                                    "per op (Python bytecode, pybind11, autograd and ATen dispatch, the backend, "
                                    "cudaLaunchKernel: J. Lin, 'From PyTorch op to kernel launch'); the sampled time "
                                    "at lines that issue ops, per op, above this is other work on those lines")

# Regressions against a baseline (tuimon/analysis/regression.py, tuimon/analysis/batches.py).
REGRESSION_FACTOR = Threshold(1.10, "x", "airspeed velocity (asv compare / continuous): a result 1.1x slower than "
                                         "its reference is a regression (its default --factor); here the mean step "
                                         "time, what the job pays per step (1 / steps per second)")
REGRESSION_P = Threshold(0.002, "p", "airspeed velocity's statistics.is_different decides at p < 0.002; here a "
                                     "one-sided Welch t-test on batch means at that level (pyperf's compare_to "
                                     "t-tests means of runs the same way, at p < 0.05 two-sided)")
REGRESSION_BATCH_S = Threshold(0.5, "s", "batch means for autocorrelated series (Conway 1963; Schmeiser, 'Batch "
                                         "size effects in the analysis of simulation output', Oper. Res. 1982): a "
                                         "batch is consecutive steps spanning at least this, or one step where steps "
                                         "are longer; long against a DataLoader's rounds (4 workers of 320 ms "
                                         "batches: a round of 4 steps every 320 ms); steps too short for the "
                                         "monitor to see each one make a batch a monitor cycle (1 s) long")
REGRESSION_BATCHES = Threshold(10, "batches", "Schmeiser (1982): 10 to 30 batches; the newest 10 are compared, so "
                                              "the window spans at least 10 steps and at least 5 s")
REGRESSION_WARMUP_STEPS = Threshold(5, "steps", "NVIDIA Resiliency Extension's num_warmup_iterations = 5 (the first "
                                                "iterations run slower: compilation, autotuning, workers starting), "
                                                "left out of baselines and windows alike")
REGRESSION_WARMUP_S = Threshold(10, "s", "JMH's default warm-up iterations last 10 s each: the job's first 10 s "
                                         "(DataLoader workers starting and their prefetched batches drained, the "
                                         "allocator growing) are left out too, whatever the step time")
PEAK_MEMORY_FACTOR = Threshold(1.10, "x", "airspeed velocity compares its peakmem benchmarks with the same --factor "
                                          "1.1: a peak allocated (the caching allocator's) 1.1x the baseline's is a "
                                          "regression of its own")

# GPU memory (tuimon/analysis/memory.py).
MEMORY_RETRIES = Threshold(0.05, "per step", "DeepSpeed ZeRO-3 (runtime/zero/stage3.py) warns at every step whose "
                                             "caching allocator retried (num_alloc_retries: freed its cache and "
                                             "called cudaMalloc again): 'high memory pressure ... detrimental to "
                                             "performance. if this is happening frequently ...'; tuimon's "
                                             "'frequently': one step in 20 of the window on average, so a single "
                                             "retry (a one-off larger batch) names nothing")
MEMORY_FULL = Threshold(0.90, "", "vLLM's gpu_memory_utilization defaults to 0.9: the share of GPU memory a tuned "
                                  "server lets its allocator fill, the rest left to the CUDA context, NCCL and other "
                                  "allocators; a peak of live tensors above it is memory that is full, below it "
                                  "retries come from memory the allocator holds in blocks of the wrong sizes "
                                  "(PyTorch's out-of-memory message: 'If reserved but unallocated memory is large "
                                  "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
                                  "fragmentation')")

# Memory growing toward the cap (tuimon/analysis/memory.py growth, analysis/verdicts/memory_growth.py).
# The method is Prometheus's predict_linear (a least-squares line through a window of a gauge,
# extended to a horizon), as node-exporter's mixin alerts with it on a filesystem filling up
# (NodeFilesystemSpaceFillingUp); its runbook's caveat, 'a periodic pattern of writing and cleaning
# up can trick the linear prediction into a false alert', is a training step's allocate-and-free:
# the fit and the high-water mark below are there for it.
MEMORY_GROWTH_WINDOW = Threshold(60, "s", "tuimon: the newest minute of the allocator's reads (~120 at one per 0.5 s): "
                                          "20 steps of a 3 s loop, and enough reads that a step's own allocate-and-"
                                          "free, read at a random point of it, averages out of the slope; a leak that "
                                          "starts mid-run fills two thirds of it (the fit below) ~40 s later")
MEMORY_GROWTH_READS = Threshold(10, "reads", "tuimon: a line through fewer reads is an anecdote; through 10, a fit of "
                                             "0.9 or more (below) comes by chance from reads without a trend with "
                                             "p = 3e-5 (the F test of a regression's slope, 1 and 8 degrees of "
                                             "freedom), below airspeed velocity's 0.002 with room for reads that are "
                                             "not independent (a step's sawtooth read every 0.5 s)")
MEMORY_GROWTH_FIT = Threshold(0.9, "R²", "tuimon: one jump (warm-up, the optimizer's state made at its first step, an "
                                         "evaluation's buffers) fits a straight line with R² = 3f(1-f) at most, 0.75 "
                                         "for a jump halfway through the window; steady growth fits it near 1; a leak "
                                         "read at random points of steps that allocate and free a swing S fits it "
                                         "with R² = rise² / (rise² + S²): 0.9 once the window's rise is 3x the swing")
MEMORY_GROWTH_PEAK = Threshold(0.5, "x", "tuimon: a job runs out of memory when a step's peak passes the cap, so "
                                         "growth that ends it raises the high-water mark (cuda.peak_allocated) as fast "
                                         "as the live bytes; over the window's newest third, a peak rising at under "
                                         "half their rate is growth that stopped (the line still fits what came "
                                         "before) or a step's allocate-and-free read out of phase (a ~0.5 s step read "
                                         "every 0.5 s traces a slow false ramp): neither makes new highs")
MEMORY_GROWTH_HORIZON = Threshold(600, "s", "tuimon: 10 minutes, time to act before the end (save a checkpoint, stop "
                                            "the job, a memory capture: M), and a line through a minute of reads "
                                            "trusted 10 minutes ahead, no further (node-exporter's mixin warns 24 h "
                                            "ahead from 6 h of a filesystem, which moves with its users; a leak moves "
                                            "with the steps)")

ALL = {name: t for name, t in globals().items() if isinstance(t, Threshold)}
