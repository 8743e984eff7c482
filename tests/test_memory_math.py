"""analysis/memory.py's arithmetic exactly: the line through the live bytes over the newest 60 s
(MEMORY_GROWTH_WINDOW, written out), the peak's line over the newest third, a counter's rise
across a reset, the forecast from 90% of the cap, and the sizes an out-of-memory message gives."""

from tuimon.analysis.memory import GIB, forecast, growth, increase, line, oom_numbers
from tuimon.model import Memory

S = 10**9  # ns


def test_the_growth_line_over_the_newest_60_s():
    old = [(0, 0, 9e9)]  # 61 s before the newest: left out (it would bend the line)
    reads = [((1 + k) * S, k, 1000.0 * k) for k in range(61)]  # 1 s apart, +1000 B each: 60 s span
    g = growth(old + reads, [(t, s, v + 5.0) for t, s, v in reads])
    assert (g.reads, g.span_s, g.rate, g.fit, g.per_step, g.peak_rate, g.allocated, g.peak) == \
        (61, 60.0, 1000.0, 1.0, 1000.0, 1000.0, 60000, 60005)
    assert growth([(0, 0, 0.0), (60 * S, 1, 10.0)]).reads == 2  # exactly 60 s apart: kept
    assert growth([(0, 0, 0.0), (60 * S + 1, 1, 10.0)]) is None
    assert growth([(0, 0, 0.0)]) is None
    flat = growth([(k * S, k, 5.0) for k in range(10)])
    assert (flat.rate, flat.fit) == (0.0, 0.0)


def test_the_peaks_line_is_over_the_newest_third():
    reads = [(k * S, k, 0.0) for k in range(31)]  # 30 s
    peaks = [(k * S, k, 0.0 if k < 20 else 500.0 if k == 20 else 100.0 * (k - 20)) for k in range(31)]
    assert growth(reads, peaks).peak_rate == 77.3  # 20..30 s: exactly the newest third, 20 s included (21..30: 100)


def test_the_least_squares_line():
    assert line([0.0, 1.0, 2.0], [1.0, 3.0, 5.0]) == (2.0, 1.0) and line([0.0, 2.0], [1.0, 5.0]) == (2.0, 1.0)
    assert line([0.0, 1.0, 2.0], [1.0, 1.0, 1.0]) == (0.0, 0.0)  # (flat: no trend to explain)
    assert line([1.0], [1.0]) == (None, 0.0) and line([1.0, 1.0], [1.0, 2.0]) == (None, 0.0)


def test_a_counter_rises_across_its_reset():
    reads = [(0, 1, 0.0), (1, 2, 3.0), (2, 3, 1.0), (3, 4, 4.0), (4, 6, 9.0)]
    assert increase(reads, 1, 3) == (7.0, 1, 4)  # 3, then a reset to 1 (counted as 1), then 3: up to step 4
    assert increase(reads, 2, 2) == (-2.0 + 3.0, 2, 3)
    assert increase([(0, 2, 5.0), (1, 2, 6.0)], 1, 3) == (None, 0, 0)  # one step: no rise to speak of
    assert increase([(0, 2, 5.0), (1, 3, 5.0)], 2, 2) == (0.0, 2, 3)


def test_the_forecast_from_90_percent_of_the_cap():
    assert forecast(Memory(peak_allocated=9 * GIB, total=10 * GIB)) == "peak 9.0 of 10.0 GiB: 10% left"
    assert forecast(Memory(peak_allocated=9 * GIB - 1, total=10 * GIB)) is None
    assert forecast(Memory(peak_allocated=9 * GIB, total=20 * GIB, limit=10 * GIB)) == \
        "peak 9.0 of the cap of 10.0 GiB: 10% left"
    assert forecast(None) is None


def test_the_sizes_of_an_out_of_memory_message():
    text = ("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 1.00 TiB of which 512 bytes "
            "is free. Of the allocated memory 3.00 KiB is allocated by PyTorch, and 7 B is reserved by PyTorch but "
            "unallocated.")
    assert oom_numbers(text) == {"asked": 20 * 2**20, "capacity": 2**40, "free": 512, "allocated": 3 * 2**10,
                                 "unallocated": 7}
    assert oom_numbers("Tried to allocate 2.00 GiB") == {"asked": 2 * 2**30} and GIB == 1073741824
