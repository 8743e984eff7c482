"""Where the probe's time goes on the loop thread of a real training step, by the probe's entry
point, read from outside by py-spy (stacks with native frames), not by a profiler inside the job.

    python benchmarks/probe_where.py [--seconds 30] [--rate 250] [--device auto] [--model demo|resnet50]

Runs benchmarks/step_overhead.py's step with the probe on (and `tuimon record` attached) while
`py-spy record --native --threads --format raw` samples the process. Each sample of the loop thread
that has a frame of tuimon's in it (Python files under tuimon/, or the C hot path) is given to the
outermost such frame: the wrapper or hook that torch or the loop called. Its share of the loop
thread's samples times the loop thread's own CPU a step is its cost a step. py-spy pauses the
process for each sample (native stacks need it), which slows the loop but not where it is: the
shares hold, the step time does not (benchmarks/step_overhead.py measures that). Needs ptrace
permission (root, or the same user with Yama's ptrace_scope 0)."""

import argparse
import collections
import linecache
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

FRAME = re.compile(r"^(?P<fn>.*) \((?P<where>[^()]*)\)$")
# A line of a wrapper that calls what it wraps: the time below it is the job's own (the original's).
PASS_THROUGH = re.compile(r"\b(orig\w*|hooked|fn|func|forward|inner)\(")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tuimon_frame(frame: str) -> tuple[str, bool] | None:
    """(the name of a stack entry of tuimon's, 'file.py:function'; whether it is at a line that calls
    what it wraps), or None for a frame not tuimon's."""
    m = FRAME.match(frame)
    if not m:
        return None
    where = m["where"]
    if "_fastring" in where:
        return f"[C] {m['fn']}", False
    path, _, line = where.rpartition(":")
    if path.startswith("tuimon/") and "/workloads/" not in path:
        source = linecache.getline(os.path.join(ROOT, path), int(line)) if line.isdigit() else ""
        return f"{path[len('tuimon/'):]}:{m['fn']}", bool(PASS_THROUGH.search(source))
    return None


def attribute(raw: str, thread: str) -> tuple[int, collections.Counter, collections.Counter]:
    """(the loop thread's samples, samples by the outermost tuimon frame, by the innermost) from
    py-spy's raw output (one 'stack count' a line, frames ';'-separated, the thread first). A sample
    is the probe's when its innermost tuimon frame is not calling the original it wraps."""
    total, outer, inner = 0, collections.Counter(), collections.Counter()
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit() or not stack.startswith(f"thread ({thread})"):
            continue
        total += int(n)
        ours = [f for f in map(tuimon_frame, stack.split(";")[1:]) if f]
        if ours and not ours[-1][1]:  # (the innermost at a call of the original: the job's time)
            outer[ours[0][0]] += int(n)
            inner[ours[-1][0]] += int(n)
    return total, outer, inner


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rate", type=int, default=250)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--raw", default="", help="keep py-spy's raw output here")
    ap.add_argument("--python-only", action="store_true",
                    help="Python frames only, read without pausing the job (--nonblocking): no pause distorts "
                         "the native calls; the probe's C calls then count in the Python frame that made them")
    a, rest = ap.parse_known_args()
    import step_overhead

    sys.argv = [sys.argv[0]] + rest
    b = step_overhead.args()
    probe, probe_on, steps, net, batch, device, cuda = step_overhead.training(b)
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    monitor = subprocess.Popen([sys.executable, "-m", "tuimon", "record", str(os.getpid()), "-o",
                                os.path.join(tempfile.mkdtemp(), "bench.jsonl"), "--interval", "1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    raw = a.raw or os.path.join(tempfile.mkdtemp(), "raw.txt")
    try:
        steps(b.warmup)
        done = threading.Event()
        cpu, n = [], [0]  # (the loop runs here, on the main thread, until py-spy is done)

        how = ["--nonblocking"] if a.python_only else ["--native"]
        rec = subprocess.Popen([spy, "record", *how, "--threads", "--format", "raw", "--rate", str(a.rate),
                                "--duration", str(int(a.seconds)), "-o", raw, "--pid", str(os.getpid())],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        threading.Thread(target=lambda: (rec.wait(), done.set()), daemon=True).start()
        t0 = time.perf_counter()
        while not done.is_set() and time.perf_counter() - t0 < a.seconds + 30:
            steps(20)
            cpu.append(steps.cpu_ms)
            n[0] += 20
        err = rec.stderr.read() if rec.stderr else ""
    finally:
        monitor.terminate()
        monitor.wait(timeout=30)
    if not os.path.exists(raw):
        print(f"py-spy wrote nothing: {err.strip()[-400:]}")
        return 1
    text = open(raw).read()
    total, outer, inner = attribute(text, str(threading.get_native_id()))
    cpu_ms = sorted(cpu)[len(cpu) // 2]
    ours = sum(outer.values())
    print(f"device {device}{' ' + __import__('torch').cuda.get_device_name(0) if cuda else ''}, model {b.model}, "
          f"{n[0]} steps, loop thread CPU {cpu_ms:.3f} ms a step (median of 20-step blocks, under py-spy's pauses)")
    print(f"loop thread samples {total}, with a tuimon frame {ours} ({ours / max(total, 1):.2%}: "
          f"~{ours / max(total, 1) * cpu_ms * 1e3:.0f} us a step)")
    for title, counts in (("by the outermost tuimon frame (the entry point)", outer),
                          ("by the innermost tuimon frame", inner)):
        print(f"\n{title:<60}{'samples':>8}{'share':>8}{'us/step':>9}")
        for name, k in counts.most_common(a.top):
            print(f"{name[:60]:<60}{k:>8}{k / max(total, 1):>8.2%}{k / max(total, 1) * cpu_ms * 1e3:>9.1f}")
    probe.writer.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
