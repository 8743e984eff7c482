"""Issue 25 on a GPU: what a torch.profiler window costs the job, and where its time goes.

Part A, in one process (the ~3,000-kernel loop of tests/workloads/gpu_loops.py): a 20-step window
under each way of running one; for each, the time to stop it, to write its trace and to free the
result, and how long each held the GIL (a thread that counts its own turns sees the gaps: the
training thread waits as long). Variants: torch.profiler.profile as tuimon ran it before;
torch.autograd.profiler with trace_only and a global state (tuimon now); that without CUDA's
runtime-API records (activity filter: kernels, memcpy and memset only); without CPU operators
(CUDA only); with a smaller CUPTI buffer (Kineto's ACTIVITIES_MAX_GPU_BUFFER_SIZE_MB=16).

Part B, whole jobs under `tuimon run`, windows asked for through `tuimon capture`'s protocol:
benchmarks/capture_cost.py for a GPU-bound loop of ~20 ms steps, the ~3,000-kernel loop and a
small GPT, under tuimon before (BEFORE: a folder holding the old tuimon/) and now; per window the
worst step in it and just after / the worst normal step, and the job's time lost. The table last.

On the GPU machine, from the repo root (the old tree made here first, where git is:
`mkdir -p .before && git archive f64f6b8 tuimon | tar -x -C .before`, and `.before` carried):
    source tests/gpu/prelude.sh; python3 tests/gpu/check_profiler_windows.py [--before .before]
        [--part A|B|both] [--jobs matmul,kernels,gpt] [--windows 3] [--steps 20]
(--part A, then B a job or two at a time, keeps each run under 10 minutes.)
--cpu: the same on the CPU (a check of this script; the numbers that count are the GPU's).
"""

import argparse
import json
import os
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
sys.path.insert(0, os.path.join(ROOT, "tests", "workloads"))

LOOPS = os.path.join(ROOT, "tests", "workloads", "gpu_loops.py")


class GilWatch:
    """A thread that counts its own turns: the gaps between them are the time another thread held
    the GIL (or the CPU was elsewhere)."""

    def __init__(self):
        self.gaps: list[float] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        last = time.perf_counter()
        while not self._stop.is_set():
            now = time.perf_counter()
            if now - last > 0.002:
                self.gaps.append(now - last)
            last = now

    def __enter__(self):
        self._t.start()
        time.sleep(0.02)
        self.gaps.clear()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()

    def held_ms(self) -> float:
        return sum(self.gaps) * 1e3


def variants(torch, cuda: bool):
    from torch.autograd import profiler as ap
    from torch.profiler import ProfilerActivity, profile

    try:
        from torch._C._profiler import _ExperimentalConfig
    except ImportError:
        _ExperimentalConfig = None

    def config(**kw):
        base = {"trace_only": True, "profile_all_threads": True}
        base.update(kw)
        for drop in ((), ("trace_only",), ("trace_only", "profile_all_threads")):
            try:
                return _ExperimentalConfig(**{k: v for k, v in base.items() if k not in drop})
            except TypeError:
                continue
        return None

    device = "cuda" if cuda else None
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])

    def before():
        p = profile(activities=acts)
        return p.start, p.stop, p.export_chrome_trace

    def now(**kw):
        def make():
            p = ap.profile(use_kineto=True, use_device=device, experimental_config=config(), **kw)

            def start():
                p._prepare_trace()
                p._start_trace()
            return start, lambda: p.__exit__(None, None, None), p.export_chrome_trace
        return make

    def custom(text):
        def make():
            p = ap.profile(use_kineto=True, use_device=device, experimental_config=config(custom_profiler_config=text))

            def start():
                p._prepare_trace()
                p._start_trace()
            return start, lambda: p.__exit__(None, None, None), p.export_chrome_trace
        return make

    out = [("torch.profiler (before)", before), ("autograd, trace_only, global (now)", now())]
    if cuda:
        out += [("now, no CUDA runtime records",
                 now(activity_filters={ProfilerActivity.CUDA: {"CONCURRENT_KERNEL", "GPU_MEMCPY", "GPU_MEMSET"}})),
                ("now, CUDA only (no CPU operators)", now(use_cpu=False)),
                ("now, CUPTI buffer 16 MB", custom("ACTIVITIES_MAX_GPU_BUFFER_SIZE_MB=16"))]
    else:
        out += [("now, CPU operators only", now(activity_filters={ProfilerActivity.CPU: {"CPU_OP"}}))]
    return out


def part_a(cuda: bool, steps: int) -> list[dict]:
    import torch

    sys.argv = ["gpu_loops.py", "kernels"]
    import gpu_loops

    dev = torch.device("cuda" if cuda else "cpu")
    if not cuda:
        torch.set_num_threads(1)
    step, _ = gpu_loops.kernels_model(dev, 20)
    for _ in range(20):
        step().item()
    rows = []
    for name, make in variants(torch, cuda):
        for attempt in ("set-up", "measured"):  # (the first window of a kind pays a one-time set-up)
            try:
                start, stop, export = make()
                start()
                t = time.perf_counter()
                for _ in range(steps):
                    step().item()
                window_ms = (time.perf_counter() - t) * 1e3
                parts = {}
                path = tempfile.mktemp(suffix=".json")
                with GilWatch() as w:
                    t = time.perf_counter()
                    stop()
                    parts["stop"] = ((time.perf_counter() - t) * 1e3, w.held_ms())
                with GilWatch() as w:
                    t = time.perf_counter()
                    export(path)
                    parts["write"] = ((time.perf_counter() - t) * 1e3, w.held_ms())
                with GilWatch() as w:
                    t = time.perf_counter()
                    start = stop = export = None  # (the last references: the result's destructor runs)
                    parts["free"] = ((time.perf_counter() - t) * 1e3, w.held_ms())
                with open(path) as f:
                    events = json.load(f)["traceEvents"]
                os.unlink(path)
            except Exception as e:  # noqa: BLE001 - a variant this torch lacks: said in its row
                rows.append({"variant": name, "error": f"{type(e).__name__}: {e}"[:100]})
                break
            if attempt == "measured":
                rows.append({"variant": name, "window_ms": window_ms, "parts": parts, "events": len(events),
                             "kernels": sum(1 for e in events if e.get("cat") == "kernel")})
    return rows


JOBS = {"matmul": "GPU-bound ~20 ms steps", "kernels": "~3,000 kernels a step", "gpt": "small GPT"}


def part_b(cuda: bool, before: str | None, windows: int, steps: int, modes: list[str]) -> list[tuple]:
    import capture_cost

    jobs = [(JOBS[m], m) for m in modes]
    trees = ([("before", capture_cost.capture_code_at(before))] if before else []) + [("now", ROOT)]
    rows = []
    for title, mode in jobs:
        cmd = [sys.executable, LOOPS, mode, "--seconds", "600"] + ([] if cuda else ["--device", "cpu"])
        for tree, root in trees:
            for r in capture_cost.measure(root, cmd, steps, windows, nsys=False):
                rows.append((title, tree, r))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", help="a folder holding tuimon/ as it was (see the docstring)")
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--cpu", action="store_true", help="run on the CPU (a check of this script)")
    ap.add_argument("--part", choices=("A", "B", "both"), default="both", help="A, B or both (default)")
    ap.add_argument("--jobs", default="matmul,kernels,gpt", help="of part B (default: all three)")
    a = ap.parse_args()
    import torch

    cuda = torch.cuda.is_available() and not a.cpu
    print(f"torch {torch.__version__}, {'GPU ' + torch.cuda.get_device_name() if cuda else 'CPU'}", flush=True)
    rows_a = part_a(cuda, a.steps) if a.part != "B" else []
    rows_b = part_b(cuda, a.before, a.windows, a.steps, a.jobs.split(",")) if a.part != "A" else []

    if rows_a:
        print(f"\n== A: one {a.steps}-step window of the ~3,000-kernel loop in one process: ms (ms of it holding the GIL)")
        print(f"{'variant':<38}{'window':>9}{'stop':>16}{'write':>16}{'free':>14}{'events':>9}{'kernels':>9}")
    for r in rows_a:
        if "error" in r:
            print(f"{r['variant']:<38}  not available: {r['error']}")
            continue
        p = r["parts"]
        cell = {k: f"{v[0]:.0f} ({v[1]:.0f})" for k, v in p.items()}
        print(f"{r['variant']:<38}{r['window_ms']:>9.0f}{cell['stop']:>16}{cell['write']:>16}{cell['free']:>14}"
              f"{r['events']:>9}{r['kernels']:>9}")
    if rows_b:
        print(f"\n== B: {a.steps}-step windows through tuimon: the worst step from the window's first to just past its end "
              "/ the worst of the normal steps before it (50, or as many as judged; budget 1.2x), and the job's time lost")
        print(f"{'job':<26}{'tuimon':<8}{'win':>4}{'worst normal':>14}{'worst':>10}{'ratio':>8}{'lost':>10}  probe says")
        for title, tree, r in rows_b:
            c = r["cost"]
            if c is None:
                print(f"{title:<26}{tree:<8}{r['window']:>4}  {r['state']}: {r['message'][:100]}")
                continue
            print(f"{title:<26}{tree:<8}{r['window']:>4}{c.worst_normal_ms:>11.1f} ms{c.worst_ms:>7.1f} ms"
                  f"{c.ratio:>7.2f}x{c.lost_ms:>7.0f} ms  {r['message'][:110]}")


if __name__ == "__main__":
    main()
