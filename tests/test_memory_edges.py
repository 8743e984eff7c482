"""memory-growth and memory-pressure on both sides of their bars, with the published values written
out: 10 reads, a fit of R² 0.9, a high-water mark rising at half the live bytes' rate, the cap
within 600 s; retries in 1 step in 20 (0.05), a peak of 90% of the cap full, below fragmented."""

from tests.helpers.flat_evidence import flat_evidence as Evidence
from tuimon.analysis.verdicts import diagnose
from tuimon.analysis.verdicts.memory_growth import duration
from tuimon.model import Memory, MemoryGrowth

GIB = 2**30
BASE = dict(steps=50, step_ms=40.0, data_share=0.01, sync_share=0.0, gpm=True, sm_active=65.0, tensor_active=5.0,
            dram_bw=10.0, fp32_active=2.0, fp16_active=1.0)


def growth(reads=10, fit=0.9, rate=1e6, peak_rate=0.5e6, peak=int(80 * GIB - 600e6) + 1, per_step=None) -> Memory:
    """Growing 1 MB/s with the peak 600 MB less a byte under an 80 GiB device: the cap in 599.999999 s."""
    return Memory(allocated=peak - GIB, peak_allocated=peak, reserved=peak, total=80 * GIB,
                  growth=MemoryGrowth(reads=reads, span_s=60.0, rate=rate, fit=fit, per_step=per_step,
                                      peak_rate=peak_rate, allocated=peak - GIB, peak=peak))


def code(m: Memory) -> str:
    return diagnose(Evidence(**BASE, memory=m)).code


def test_growth_on_both_sides_of_each_bar():
    assert code(growth()) == "memory-growth"  # every bar met exactly, the cap within 600 s
    assert code(growth(reads=9)) == "mixed"
    assert code(growth(fit=0.8999)) == "mixed"
    assert code(growth(peak_rate=0.4999e6)) == "mixed"
    assert code(growth(peak=int(80 * GIB - 600e6))) == "mixed"  # the cap in 600 s: not within
    assert code(growth(rate=0.0, peak_rate=0.0)) == "mixed" and code(growth(rate=-1e6)) == "mixed"


def test_growth_in_words():
    v = diagnose(Evidence(**BASE, memory=growth(per_step=40e3)))
    assert v.headline == "memory growth: full in ~10 min at this rate"
    assert v.evidence.startswith("+39 KiB a step (+57 MiB/min), ")
    assert diagnose(Evidence(**BASE, memory=growth(per_step=0.0))).evidence.startswith("+57 MiB/min, ")
    assert [duration(s) for s in (None, 89.4, 90.0, 5399.0, 5400.0)] == ["n/a", "~89 s", "~2 min", "~90 min", "~1.5 h"]


def pressure(rate: float, peak: float = 0.95, ooms: int = 0) -> Memory:
    return Memory(allocated=GIB, reserved=70 * GIB, peak_allocated=int(peak * 80 * GIB), total=80 * GIB,
                  retries_per_step=rate, retries_from=1, retries_to=21, ooms_in_window=ooms)


def test_pressure_from_one_retry_in_20_steps_or_an_oom_caught():
    assert code(pressure(0.05)) == "memory-pressure" and code(pressure(0.0499)) == "mixed"
    assert code(pressure(0.0, ooms=1)) == "memory-pressure" and code(pressure(0.0, ooms=0)) == "mixed"


def test_a_peak_of_90_percent_of_the_cap_is_full_and_below_it_fragmented():
    full = diagnose(Evidence(**BASE, memory=pressure(0.5, peak=0.90))).next_step
    assert full.startswith("the live tensors fill 90% of")
    frag = diagnose(Evidence(**BASE, memory=pressure(0.5, peak=0.8999))).next_step
    assert frag.startswith("the live tensors peak at 90% of") and "fragmentation" in frag
    assert diagnose(Evidence(**BASE, memory=pressure(0.0625))).confidence == "high"  # 1.25x the bar
    assert diagnose(Evidence(**BASE, memory=pressure(0.0624))).confidence == "medium"


def test_a_flat_line_never_reaches_the_cap():
    [rule] = [r for r in diagnose(Evidence(**BASE, memory=growth(rate=0.0, peak_rate=0.0))).rules
              if r.code == "memory-growth"]
    assert (rule.checks[-1].value, rule.checks[-1].passed) == ("never (not growing)", False)
    [rule] = [r for r in diagnose(Evidence(**BASE, memory=growth())).rules if r.code == "memory-growth"]
    assert (rule.checks[-1].value, rule.checks[-1].passed) == ("~10 min", True)
