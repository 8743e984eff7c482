"""Numbers and words as text, shared by the panels, `--plain` and `--once`: plain strings, no
Rich, no Textual. Strings from other processes go through safe_text."""

from __future__ import annotations

from ..analysis.anatomy import how_of
from ..channel.text import safe_text
from ..model import NA, Comparison, GpuProcess, GpuSample, HostSample, HotLine, num
from ..model.units import gib, human_bytes, percent
from ..model.vocab import VERDICT_CODES, ComparisonState, VerdictCode

# Each verdict's class in words, as the help lists them.
VERDICT_NAMES: dict[VerdictCode, str] = {
    "exited": "exited", "stalled": "stalled", "waiting": "not enough data yet", "memory-growth": "memory growth",
    "straggler": "straggler", "memory-pressure": "memory pressure",
    "input-bound": "input-bound", "copy-bound": "copy-bound", "comm-bound": "comm-bound",
    "memory-bound": "GPU memory-bound", "compute-bound": "compute-bound", "healthy": "healthy", "cpu-bound": "CPU-bound",
    "data-parallel": "DataParallel",
    "sync-bound": "sync-bound", "host-bound": "host-bound", "mixed": "no single bottleneck"}

# The comparison's state in words: on the baseline panel's badge, and in the plain-text line.
COMPARISON_BADGE: dict[ComparisonState, str] = {"regression": "REGRESSION", "faster": "FASTER", "same": "AS BASELINE",
                                                "collecting": "BASELINE"}
COMPARISON_WORDS: dict[ComparisonState, str] = {"regression": "REGRESSION", "faster": "faster than baseline",
                                                "same": "as baseline", "collecting": "baseline"}
# What counts the steps (vocab.StepSource, read from a channel: .get() with the name itself as default).
STEP_SOURCE_WORDS: dict[str, str] = {
    "optimizer": "optimizer.step()", "tuimon.step": "tuimon.step()", "backward": "each backward() (no optimizer step seen)",
    "forward": "each model call (no backward seen)", "dataloader": "each DataLoader batch (no model call seen)"}

BLOCKS = " ▁▂▃▄▅▆▇█"


def spark(values: list, width: int, lo: float = 0.0, hi: float | None = 100.0) -> str:
    """The last `width` values as block characters; a gap where a value is unavailable."""
    vals = values[-width:] if width > 0 else []
    nums = [v for v in vals if v is not None]
    top = hi if hi is not None else (max(nums) if nums else 1.0)
    span = (top - lo) or 1.0
    out = []
    for v in vals:
        if v is None:
            out.append(" ")
        else:
            out.append(BLOCKS[max(1, min(8, round((v - lo) / span * 8)))] if v > lo else BLOCKS[1])
    return "".join(out).rjust(width)


def fit(s: str, width: int) -> str:
    """s made safe for the terminal and cut to width characters (with its "…"), so it never wraps."""
    s = safe_text(s, max(width, 1) * 4)
    return s if len(s) <= width else s[: max(width - 1, 0)] + "…"


def duration(s: float) -> str:
    s = int(s)
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def seconds(s: float) -> str:
    """A span as people say it: 0.4 s, 12 s, 4 min 12 s, 1:02:03."""
    if s < 10:
        return f"{s:.1f} s"
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{int(s) // 60} min {int(s) % 60:02d} s"
    return duration(s)


def short_command(argv: list) -> str:
    """The command line with paths cut to their last part: `python train.py --lr 3e-4`."""
    def short(k: int, a: str) -> str:
        path_like = a.startswith(("/", "./", "../", "~/")) or (k == 0 and "/" in a)
        return a.rstrip("/").rsplit("/", 1)[-1] if path_like else a

    return " ".join(short(k, str(a)) for k, a in enumerate(argv))


def step_time(ms: float) -> str:
    """A step time as people read it: 0.84 ms, 80.8 ms, 2.00 s."""
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:.1f} ms" if ms < 1000 else f"{ms / 1e3:.2f} s"


def vs(now: float, then: float) -> str:
    """'161.1 ms vs 80.8', '3.01 s vs 2.00': the unit once, the baseline's in the same unit."""
    if now >= 1000 or then >= 1000:
        return f"{now / 1e3:.2f} s vs {then / 1e3:.2f}"
    return f"{step_time(now)} vs {then:.2f}" if now < 10 and then < 10 else f"{step_time(now)} vs {then:.1f}"


def throughput_words(per_s: dict[str, float], n: int = 2) -> list[str]:
    """The job's first n counters per second: ['1,234 samples/s', ...]."""
    return [f"{v:,.0f} {safe_text(str(name), 24)}/s" for name, v in list(per_s.items())[:n]]


def p_words(c: Comparison) -> str:
    """', p = 0.012' (', p < 0.001') where the p-value decided something: not for 'same'."""
    if c.state == "same" or c.p_value is None:  # (a decided comparison has its p-value)
        return ""
    return ", p < 0.001" if c.p_value < 0.001 else f", p = {c.p_value:.3f}"


def verdict_names() -> str:
    """Every class a verdict names, in the order the rules try them: 'exited, stalled, ..., or no
    single bottleneck' (not 'waiting': no verdict yet, which the verdict panel says as such)."""
    names = [VERDICT_NAMES[code] for code in VERDICT_CODES if code != "waiting"]
    return ", ".join(names[:-1]) + ", or " + names[-1]


def peak_memory_words(c: Comparison) -> str:
    """'peak memory +18%: 61.0 → 72.1 GiB' (empty: no allocator numbers on one side)."""
    m = c.peak_memory
    if m is None:
        return ""
    return f"peak memory {m.ratio - 1:+.0%}: {gib(m.baseline_bytes)} → {gib(m.now_bytes)} GiB"


def how_words(h: HotLine) -> str:
    """How the loop thread was at a line: 'Python', 'in a native call 80%', ... (its largest)."""
    word, share = how_of(h)
    return word if share >= 0.95 else f"{word} {share:.0%}"


def value(v: object) -> str:
    return "n/a" if isinstance(v, NA) else str(v)


def gpu_line(s: GpuSample) -> str:
    """One GPU in a line (`top --once`)."""
    name = s.name if isinstance(s.name, str) else "?"
    if s.lost is not None:
        return f"GPU {s.index} {name}: lost: {s.lost.reason}"
    if s.gpm:
        act = f"SM {percent(s.sm_active, 4).strip()}  tensor {percent(s.tensor_active, 4).strip()}  DRAM {percent(s.dram_bw, 4).strip()}"
    else:
        act = f"util {percent(s.util_gpu, 4).strip()} (coarse)  mem-ctl {percent(s.util_mem, 4).strip()}"
    power = f"  power {s.power_w:.0f}/{s.power_limit_w:.0f} W" if num(s.power_w) is not None and num(s.power_limit_w) else ""
    temp = f"  {s.temp_c}°C" if num(s.temp_c) is not None else ""
    return f"GPU {s.index} {safe_text(name, 40)}  {act}{power}  mem {gib(s.mem_used)}/{gib(s.mem_total)} GiB{temp}"


PROCESS_HEADER = f"{'PID':>8}  {'USER':<10}  {'GPU MEM':>9}  {'SM':>4}  COMMAND"


def gpu_process_rows(s: GpuSample) -> list[str]:
    """A GPU's processes as table rows: PID, user, GPU memory, SM share, command."""
    procs = s.processes
    if isinstance(procs, NA):
        return [f"processes: {procs.reason}"]
    if not procs:
        return ["no processes"]
    return [PROCESS_HEADER, *map(process_row, procs)]


def all_process_rows(samples: list[GpuSample]) -> list[str]:
    """Every GPU's processes in one table, each row led by its GPU (`top` with a line per GPU)."""
    rows = []
    for s in samples:
        if s.lost is not None:
            continue  # (its line says so)
        if isinstance(s.processes, NA):
            rows.append(f"{s.index:>3}  processes: {s.processes.reason}")
        else:
            rows += [f"{s.index:>3}  {process_row(p)}" for p in s.processes]
    return [f"{'GPU':>3}  {PROCESS_HEADER}", *rows] if rows else ["no processes on any GPU"]


def process_row(p: GpuProcess) -> str:
    mem = f"{gib(p.gpu_mem)} GiB" if p.gpu_mem is not None else "n/a"
    sm = f"{p.sm_util}%" if p.sm_util is not None else ""
    cmd = safe_text(p.command or p.name or "(not visible: another user's, or another PID namespace)", 200)
    return f"{p.pid:>8}  {safe_text(p.user or '?', 10):<10}  {mem:>9}  {sm:>4}  {cmd}"


def host_line(h: HostSample) -> str:
    return (f"host: CPU {h.cpu_percent:.0f}% of {h.cpus} cores · memory {human_bytes(h.mem_used)} of "
            f"{human_bytes(h.mem_total)}")
