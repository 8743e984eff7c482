"""Issue 22 item 6 on the GPU machine: `tuimon attach` to GPU jobs started WITHOUT the probe. For
each job: how soon the main thread's hot lines come (py-spy from outside), the verdict from NVML
and the top line, the planted line's share against the loop's own timers; then what the sampling
costs the job (its step time with and without the attach, benchmarks/attach_pyspy_cost.py).
Prints a table last.

On the GPU machine, from the repo root (py-spy travels as a wheel in .whl: .gpu/fetch-wheels.sh):
    source .gpu/activate.sh; source tests/gpu/prelude.sh; python3 tests/gpu/check_attach_pyspy.py $OUT
(`--cpu`: a dry run of the script on a machine without a GPU.)

Look for: lines after <= 5 s for both jobs; `compute` judged compute-bound (tensor) from NVML with
"needs `tuimon run`" in its next step; `hotspot` host-bound from outside with spin() within 0.1 of
its truth; on/off ratios of the cost table near 1 (nonblocking: the job is never stopped).
"""

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from tuimon.analysis import thresholds as T  # noqa: E402
from tuimon.monitor.session import LiveSession  # noqa: E402
from tuimon.monitor.state import MonitorState  # noqa: E402
from tuimon.sources import pyspy  # noqa: E402

PY = sys.executable
PLANTED = os.path.join(ROOT, "tests", "workloads", "planted.py")


def read(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def wait_truth(path, job, timeout=180):
    end = time.monotonic() + timeout
    while time.monotonic() < end and job.poll() is None:
        if read(path):
            return read(path)
        time.sleep(0.5)
    raise SystemExit(f"no truth from the job at {path} (exit {job.poll()})")


def spent(d):
    return d["steps"] * d["step_ms"]


def one(kind, out, device):
    truth = os.path.join(out, f"truth_{kind}.json")
    if os.path.exists(truth):
        os.unlink(truth)
    job = subprocess.Popen([PY, PLANTED, kind, "--seconds", "90", "--device", device, "--truth", truth],
                           stdout=subprocess.DEVNULL)
    row = {"job": kind}
    try:
        wait_truth(truth, job)
        time.sleep(2)
        before = read(truth)
        session, state = LiveSession(job.pid, 0.5, outside=True), MonitorState()
        t0, first = time.monotonic(), None
        while time.monotonic() - t0 < 12:
            c = session.poll()
            state.apply(c)
            if first is None and c.outside is not None and c.outside.samples >= T.HOT_MIN_SAMPLES.value:
                first = time.monotonic() - t0
            time.sleep(max(0.0, 0.5 - (time.monotonic() - t0) % 0.5))
        session.stop()
        after = read(truth)
        view = state.view()
        o = view.outside
        row.update(lines_after_s=first, samples=o.samples if o else 0, state=o.state if o else None,
                   why=o.why if o else None, verdict=view.verdict.headline,
                   evidence=view.verdict.evidence, next_step=view.verdict.next_step,
                   top=o.hot_lines[0].line if o and o.hot_lines else None,
                   top_share=o.hot_lines[0].share if o and o.hot_lines else None)
        if kind == "hotspot" and o is not None:
            hot = (after["hot_share"] * spent(after) - before["hot_share"] * spent(before)) / (spent(after) - spent(before))
            row["spin_share"] = round(sum(h.share for h in o.hot_lines if " in spin" in h.line), 3)
            row["truth"] = round(hot, 3)  # (spin() runs only at the hot line: its other work is bookkeeping())
        p = subprocess.run([PY, "-m", "tuimon", "attach", str(job.pid), "--once", "--json", "--window", "5"],
                           capture_output=True, text=True, timeout=120)
        with open(os.path.join(out, f"attach_{kind}.json"), "w") as f:
            f.write(p.stdout)
        snap = json.loads(p.stdout) if p.returncode == 0 else {}
        row["cli_5s"] = (f"{len(snap.get('hot_lines', []))} lines, {snap.get('samples')} samples, "
                         f"{snap.get('verdict', {}).get('code')}") if snap else f"rc {p.returncode}: {p.stderr[-300:]}"
    finally:
        job.kill()
        job.wait()
    print(json.dumps(row, indent=1), flush=True)
    return row


def main():
    args = sys.argv[1:]
    cpu = "--cpu" in args  # a dry run of this script where there is no GPU: hotspot on the CPU, a short cost run
    out = next((a for a in args if not a.startswith("--")), "/tmp/out")
    os.makedirs(out, exist_ok=True)
    device = "cpu" if cpu else "cuda"
    exe = pyspy.find_pyspy()
    print(f"py-spy: {exe} ({pyspy._version(exe) if exe else 'missing'}); uid {os.geteuid()}; "
          f"ptrace_scope {pyspy._ptrace_scope()}; CAP_SYS_PTRACE {pyspy._has_cap_ptrace()}", flush=True)
    rows = [one(kind, out, device) for kind in (("hotspot",) if cpu else ("compute", "hotspot"))]
    print("=== cost: the job's step time with and without the attach", flush=True)
    cost = subprocess.run([PY, os.path.join(ROOT, "benchmarks", "attach_pyspy_cost.py"), "--device", device,
                           "--pairs", "2" if cpu else "6", "--block-s", "6" if cpu else "10",
                           "--modes", "nonblocking,blocking"],
                          capture_output=True, text=True, timeout=400)
    print(cost.stdout[-3000:], cost.stderr[-1000:])
    print("\n=== table")
    print(f"{'job':<9}{'lines after s':>14}{'samples':>9}{'spin/truth':>13}  {'verdict':<48}top line")
    for r in rows:
        lines = "n/a" if r.get("lines_after_s") is None else f"{r['lines_after_s']:.1f}"
        spin = f"{r['spin_share']:.2f}/{r['truth']:.2f}" if "spin_share" in r else "-"
        print(f"{r['job']:<9}{lines:>14}{r.get('samples', 0):>9}{spin:>13}  {r.get('verdict', '')[:46]:<48}"
              f"{(r.get('top') or r.get('why') or '')[:70]} {r.get('top_share') or ''}")
    print("\n".join(cost.stdout.strip().splitlines()[-3:]))


if __name__ == "__main__":
    main()
