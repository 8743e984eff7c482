"""Issue 21's proof (the present moment), on the GPU machine or here on the CPU: each case under
`tuimon run --headless`, watched by a monitor in this process (the same session and state the TUI
uses) beside the loop's own truth (tests/workloads/present.py). Prints a table last.

    python3 tests/gpu/check_present.py OUT_DIR [--seconds S] CASE...

CASE:
  sync-stuck      (GPU) a kernel that spins for hours, then .item(): STALLED in sync, how soon
  oom             (GPU) allocations growing until CUDA runs out of memory: EXITED with the OOM
  manual          hand-written SGD (no optimizer) on --device: tuimon's steps beside the loop's
  ddp-hang        two ranks (torchrun; NCCL on --device cuda, gloo on cpu), rank 1 stops before an
                  all_reduce: the rank named, the collective rank 0 waits in, how soon
  calm:KIND       a healthy loop for --seconds (planted.py KIND, or `checkpoint`: 10 s every 60 s):
                  every STALLED verdict it got (should be none), and what it showed during pauses
"""

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from tuimon.monitor.session import LiveSession  # noqa: E402
from tuimon.monitor.state import MonitorState  # noqa: E402

PY = sys.executable
PRESENT = os.path.join(ROOT, "tests", "workloads", "present.py")
PLANTED = os.path.join(ROOT, "tests", "workloads", "planted.py")


def start(out, name, argv):
    log = open(os.path.join(out, f"{name}.out"), "w")
    return subprocess.Popen([PY, "-m", "tuimon", "run", "--headless", "--", PY, *argv], stdout=log,
                            stderr=subprocess.STDOUT, cwd=ROOT)


def truth(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def watch(job, seconds, until=None, every=1.0):
    """Poll as the TUI does; returns [(monotonic, view)] and stops at until(view) or after seconds."""
    session, state, seen = LiveSession(job.pid, every), MonitorState(), []
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            state.apply(session.poll())
            view = state.view()
            seen.append((time.monotonic(), view))
            if until is not None and until(view):
                break
            time.sleep(every)
    finally:
        session.stop()
    return seen


def case_sync_stuck(out, a):
    t = os.path.join(out, "sync-stuck.truth.json")
    job = start(out, "sync-stuck", [PRESENT, "sync-stuck", "--steps", "50", "--truth", t])
    rec = subprocess.Popen([PY, "-m", "tuimon", "record", str(job.pid), "-o", os.path.join(out, "sync_stuck.jsonl"),
                            "--seconds", "45", "--note", "tests/workloads/present.py sync-stuck: a kernel that spins "
                            "for hours after 50 steps, then .item()"], cwd=ROOT)
    seen = watch(job, 90, until=lambda v: v.verdict.code == "stalled" and v.training.stacks)
    rec.wait(60)
    stuck = truth(t).get("stuck") or {}
    job.kill()
    at, v = seen[-1]
    g = next((x.latest for x in v.gpus if x.latest.index in v.target_gpus), None)
    return {"case": "sync-stuck", "truth": f"stuck {stuck.get('what')} after {truth(t).get('steps')} steps",
            "tuimon": f"{v.verdict.code}: {v.verdict.headline} | {v.verdict.evidence}",
            "when": f"{at - stuck['at']:.1f} s after the stuck kernel" if stuck else "n/a",
            "gpu": f"SM {getattr(g, 'sm_active', None)}%, util {getattr(g, 'util_gpu', None)}%, "
                   f"{getattr(g, 'power_w', None)} W of {getattr(g, 'power_limit_w', None)}" if g else "n/a"}


def case_oom(out, a):
    t = os.path.join(out, "oom.truth.json")
    job = start(out, "oom", [PRESENT, "oom", "--steps", "40", "--truth", t])
    seen = watch(job, 120, until=lambda v: v.verdict.code == "exited")
    job.wait(30)
    _, v = seen[-1]
    m = v.training.memory if v.training else None
    return {"case": "oom", "truth": f"{truth(t).get('steps')} steps, exit code {job.returncode}",
            "tuimon": f"{v.verdict.code}: {v.verdict.headline} | {v.verdict.evidence}",
            "when": f"{v.training.steps if v.training else None} steps",
            "gpu": f"allocated {m.allocated}, reserved {m.reserved}, peak {m.peak_allocated}" if m else "n/a"}


def case_manual(out, a):
    t = os.path.join(out, "manual.truth.json")
    job = start(out, "manual", [PRESENT, "manual", "--steps", "3000", "--device", a.device, "--truth", t])
    seen = watch(job, 300, until=lambda v: v.verdict.code == "exited")
    _, v = seen[-1]
    mid = next((w for _, w in seen if w.training and w.training.steps and w.verdict.code not in ("waiting",)), v)
    return {"case": f"manual ({a.device})", "truth": f"{truth(t).get('steps')} steps",
            "tuimon": f"{v.training.steps if v.training else None} steps from {v.training.step_source if v.training else None}",
            "when": f"mid-run verdict: {mid.verdict.headline}", "gpu": ""}


def case_ddp_hang(out, a):
    """Two ranks (NCCL on two GPUs, gloo on the CPU): rank 1 stops before an all_reduce after 30 steps."""
    t = os.path.join(out, "ddp-hang.truth.json")
    log = open(os.path.join(out, "ddp-hang.out"), "w")
    job = subprocess.Popen([PY, "-m", "tuimon", "run", "--headless", "--", PY, "-m", "torch.distributed.run",
                            "--standalone", "--nproc-per-node", "2", PRESENT, "ddp-hang", "--steps", "30",
                            "--device", a.device, "--truth", t], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    rec = subprocess.Popen([PY, "-m", "tuimon", "record", str(job.pid), "-o", os.path.join(out, "ddp_hang.jsonl"),
                            "--seconds", "50", "--note", f"tests/workloads/present.py ddp-hang on {a.device}: rank 1 "
                            "sleeps for good before an all_reduce after 30 steps"], cwd=ROOT)
    seen = watch(job, 120, until=lambda v: v.verdict.code == "stalled" and len(v.ranks) == 2
                 and any(r.stalled for r in v.ranks) and "holds" in v.verdict.headline)
    stuck = truth(t + ".1").get("stuck") or {}
    rec.wait(70)
    job.kill()
    subprocess.run(["pkill", "-f", "present.py ddp-hang"], check=False)
    at, v = seen[-1]
    ranks = "; ".join(f"rank {r.rank}: {r.now_phase} {r.now_phase_s or 0:.0f} s, steps {r.steps}, last {r.collective}"
                      f"{' STALLED' if r.stalled else ''}" for r in v.ranks)
    return {"case": f"ddp-hang ({a.device})", "truth": f"rank 1 {stuck.get('what')}",
            "tuimon": f"{v.verdict.code}: {v.verdict.headline} | {v.verdict.next_step}",
            "when": f"{at - stuck['at']:.1f} s after rank 1 stopped" if stuck else "n/a", "gpu": ranks}


def case_calm(out, a, kind):
    t = os.path.join(out, f"calm-{kind}.truth.json")
    argv = [PRESENT, "checkpoint", "--every", "60", "--truth", t] if kind == "checkpoint" else \
        [PLANTED, kind, "--seconds", str(a.seconds + 30), "--device", a.device, "--truth", t]
    job = start(out, f"calm-{kind}", argv)
    seen = watch(job, a.seconds)
    job.kill()
    stalled = [(round(at - seen[0][0]), v.verdict.evidence) for at, v in seen if v.verdict.code == "stalled"]
    pauses = sorted({round(v.training.now.phase_s) for _, v in seen
                     if v.training and v.training.now and v.training.now.phase_s >= 2})
    codes = sorted({v.verdict.code for _, v in seen})
    bars = sorted({round(v.stall.limit_s) for _, v in seen if v.stall})
    return {"case": f"calm {kind}", "truth": f"{truth(t).get('steps', truth(t).get('log') and '...')} steps",
            "tuimon": f"{len(stalled)} STALLED of {len(seen)} samples; verdicts {codes}",
            "when": f"pauses seen (s in one phase): {pauses[:12]}; stall bars {bars}",
            "gpu": "; ".join(f"{s}s: {e}" for s, e in stalled[:3])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for c in a.cases:
        t0 = time.monotonic()
        if c.startswith("calm:"):
            row = case_calm(a.out, a, c.split(":", 1)[1])
        else:
            row = {"sync-stuck": case_sync_stuck, "oom": case_oom, "manual": case_manual,
                   "ddp-hang": case_ddp_hang}[c](a.out, a)
        row["s"] = round(time.monotonic() - t0)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| case | the loop's truth | tuimon | when / detail | GPU or stalls |\n| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['case']} | {r['truth']} | {r['tuimon']} | {r['when']} | {r['gpu']} |")


if __name__ == "__main__":
    main()
