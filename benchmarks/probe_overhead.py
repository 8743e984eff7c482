"""Cost of one range enter+exit: tuimon.range (with and without NVTX forwarding) beside
nvtx.annotate and torch.profiler.record_function, measured side by side in one process.

    python benchmarks/probe_overhead.py [--n 200000] [--repeat 7]

tuimon.range is measured with the hot path this install uses (C when built) and, when that is C,
with the pure-Python fallback too.

Each variant runs `repeat` rounds of n iterations, the rounds interleaved across variants so
that machine noise hits all of them alike; the table reports the best round (ns per enter+exit)
and its ratio to nvtx.annotate. Goals (issue 2): without forwarding <= 1.0x nvtx.annotate,
with forwarding <= 1.6x. Under nsys, NVTX has a tool attached and forwarding does real work.
"""

import argparse
import os
import sys
import tempfile
import timeit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    os.environ.setdefault("TUIMON_SHM_DIR", tempfile.mkdtemp())

    import nvtx  # measured before tuimon patches it
    from torch.profiler import record_function

    annotate = nvtx.annotate
    tool = "attached" if not isinstance(nvtx.get_domain(None), nvtx._lib.DummyDomain) else "none"

    import mmap

    import tuimon
    from tuimon.channel import layout as L
    from tuimon.channel import ring, ring_py
    from tuimon.probe import state

    st = tuimon.instrument(nvtx_forward=False)
    assert st.enabled, st
    probe, writer = state.probe, state.probe.writer
    domain = nvtx.get_domain(None)

    # The pure-Python hot path, measured beside the C one: its own ring of the same size.
    py_buf = mmap.mmap(-1, L.segment_size(L.DEFAULT_RING_RECORDS))
    py_ring = ring_py.RingWriter(py_buf, L.RING_OFFSET, L.DEFAULT_RING_RECORDS, L.OFF_RING_HEAD, L.OFF_STEPS)

    class py_range(ring_py.Range):  # as tuimon.range subclasses ring.Range
        __slots__ = ()

    def set_forwarding(impl, on):
        probe._nvtx = domain if on else None
        if impl == "python":
            ring_py.bind(py_ring, writer.names, writer.intern, probe.nvtx_push if on else None,
                         probe.nvtx_pop if on else None)
        else:
            ring.bind(writer.ring, writer.names, writer.intern, probe.nvtx_push if on else None,
                      probe.nvtx_pop if on else None)

    def t_annotate():
        with annotate("step"):
            pass

    def t_record_function():
        with record_function("step"):
            pass

    def t_tuimon():
        with tuimon.range("step"):
            pass

    def t_tuimon_py():
        with py_range("step"):
            pass

    impl = ring.IMPLEMENTATION
    variants = [("nvtx.annotate", t_annotate, None), (f"tuimon.range [{impl}]", t_tuimon, (impl, False)),
                (f"tuimon.range [{impl}] + NVTX forwarding", t_tuimon, (impl, True))]
    if impl == "c":
        variants += [("tuimon.range [python]", t_tuimon_py, ("python", False)),
                     ("tuimon.range [python] + NVTX forwarding", t_tuimon_py, ("python", True))]
    variants.append(("torch.profiler.record_function", t_record_function, None))
    best = {name: float("inf") for name, _, _ in variants}
    for _ in range(a.repeat):
        for name, fn, fwd in variants:
            if fwd is not None:
                set_forwarding(*fwd)
            n = a.n if "record_function" not in name else a.n // 10
            best[name] = min(best[name], timeit.timeit(fn, number=n) / n * 1e9)
    base = best["nvtx.annotate"]
    print(f"python {sys.version.split()[0]}, NVTX tool: {tool}, {a.repeat} rounds x {a.n} iterations")
    print(f"{'variant':<44}{'ns/range':>10}{'x annotate':>12}")
    for name, _, _ in variants:
        print(f"{name:<44}{best[name]:>10.0f}{best[name] / base:>12.2f}")
    assert writer.enabled and py_ring.enabled and py_ring.head > 0, "a hot path stopped writing"
    writer.unlink()


if __name__ == "__main__":
    main()
