"""Cost of one range enter+exit: tuimon.range (with and without NVTX forwarding) beside
nvtx.annotate and torch.profiler.record_function, measured side by side in one process.

    python benchmarks/probe_overhead.py [--n 200000] [--repeat 7]

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

    import tuimon
    from tuimon.probe import api

    def t_annotate():
        with annotate("step"):
            pass

    def t_record_function():
        with record_function("step"):
            pass

    def t_tuimon():
        with tuimon.range("step"):
            pass

    st = tuimon.instrument(nvtx_forward=False)
    assert st.enabled, st
    probe = api._probe
    domain = nvtx.get_domain(None)

    def set_forwarding(on):
        probe._nvtx = domain if on else None

    variants = [
        ("nvtx.annotate", t_annotate, None),
        ("tuimon.range", t_tuimon, False),
        ("tuimon.range + NVTX forwarding", t_tuimon, True),
        ("torch.profiler.record_function", t_record_function, None),
    ]
    best = {name: float("inf") for name, _, _ in variants}
    for _ in range(a.repeat):
        for name, fn, fwd in variants:
            if fwd is not None:
                set_forwarding(fwd)
            n = a.n if "record_function" not in name else a.n // 10
            best[name] = min(best[name], timeit.timeit(fn, number=n) / n * 1e9)
    base = best["nvtx.annotate"]
    print(f"python {sys.version.split()[0]}, NVTX tool: {tool}, {a.repeat} rounds x {a.n} iterations")
    print(f"{'variant':<34}{'ns/range':>10}{'x annotate':>12}")
    for name, _, _ in variants:
        print(f"{name:<34}{best[name]:>10.0f}{best[name] / base:>12.2f}")
    api._probe.writer.unlink()


if __name__ == "__main__":
    main()
