"""Issue 9's proof on the GPU machine: each planted loop (tests/workloads/planted.py) under
`tuimon run`, tuimon's verdict and evidence after ATTACH_AFTER_S beside the loop's own truth, and
the step anatomy beside the loop's own timers. Prints a table last (the README's).

    python3 tests/gpu/check_diagnosis.py OUT_DIR [kind ...]

For `launch`, `memory` and `compute` it also takes a torch.profiler capture of the running job
(tuimon capture) and shows what it found, as the cross-check the issue asks for.
"""

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLANTED = os.path.join(ROOT, "tests", "workloads", "planted.py")
PY = sys.executable
KINDS = ["input", "phases", "lightning", "python", "launch", "sync", "memory", "compute", "healthy"]
PLANTED_CLASS = {"input": "input-bound", "phases": "input-bound (data 20% of the step)",
                 "lightning": "input-bound (data 24%)", "python": "host-bound (Python outside the model)",
                 "launch": "host-bound (launches)", "sync": "sync-bound", "memory": "memory-bound",
                 "compute": "compute-bound", "healthy": "healthy (GPU busy)"}
ATTACH_AFTER_S = 12
RUN_S = 22
CAPTURE = {"launch", "memory", "compute"}


def tuimon(*args, timeout=120):
    return subprocess.run([PY, "-m", "tuimon", *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def one(kind: str, out: str) -> dict:
    truth_path = os.path.join(out, f"{kind}.truth.json")
    job = subprocess.Popen([PY, "-m", "tuimon", "run", "--headless", "--", PY, PLANTED, kind, "--seconds", str(RUN_S),
                            "--truth", truth_path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    first = job.stdout.readline().strip()
    start = time.monotonic()
    capture = None
    if kind in CAPTURE:  # once the loop is past its warm-up (and its own profiling, for `launch`)
        while not os.path.exists(truth_path) and time.monotonic() - start < ATTACH_AFTER_S:
            time.sleep(0.2)
        c = tuimon("capture", job.pid, "--steps", 5, "--wait", "--timeout", 60)
        capture = (c.stdout + c.stderr).strip().splitlines()
    time.sleep(max(0.0, ATTACH_AFTER_S - (time.monotonic() - start)))
    # a few seconds of window: GPU activity averaged, and the capture's summary made (kernels per step)
    a = tuimon("attach", job.pid, "--once", "--json", "--window", 4 if kind in CAPTURE else 1)
    rest = job.communicate(timeout=120)[0]
    snap = json.loads(a.stdout) if a.returncode == 0 and a.stdout.strip() else {"error": a.stderr}
    truth = json.load(open(truth_path)) if os.path.exists(truth_path) else {}
    with open(os.path.join(out, f"{kind}.attach.json"), "w") as f:
        json.dump(snap, f, indent=1)
    return {"kind": kind, "snap": snap, "truth": truth, "capture": capture, "log": first + "\n" + rest[-2000:]}


def gpu_means(snap):
    g = [x for x in snap.get("gpus", []) if x.get("index") in snap.get("target_gpus", [])]
    return g[0] if g else {}


def fmt(v, pct=True):
    if not isinstance(v, (int, float)):
        return "n/a"
    return f"{v:.0%}" if pct else f"{v:.1f}"


def truth_line(kind, t):
    if not t:
        return "no truth written"
    s = t["shares"]
    parts = [f"step {t['step_ms']:.1f} ms"]
    if s.get("data"):
        parts.append(f"data {s['data']:.0%}")
    if kind in ("phases", "lightning", "python"):
        parts.append("fwd {forward:.0%} bwd {backward:.0%} opt {optimizer:.0%} other {other:.0%}".format(**s))
    if s.get("sync"):
        parts.append(f"sync {s['sync']:.0%} ({t['syncs_per_step']:.0f}/step)")
    for key, label in (("gpu_busy_share", "GPU busy (events) {:.0%}"), ("gpu_span_share", "GPU busy (events) {:.0%}"),
                       ("kernels_per_step", "{:,.0f} kernels/step"), ("forward_dram_tb_per_s", "fwd DRAM {:.2f} TB/s"),
                       ("forward_tflops", "fwd {:.0f} TFLOP/s")):
        if key in t:
            parts.append(label.format(t[key]))
    return ", ".join(parts)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/out"
    kinds = sys.argv[2:] or KINDS
    os.makedirs(out, exist_ok=True)
    rows = []
    for kind in kinds:
        print(f"=== {kind}", flush=True)
        r = one(kind, out)
        rows.append(r)
        snap, t = r["snap"], r["truth"]
        if "error" in snap:
            print("attach failed:", snap["error"][-500:], "\n", r["log"][-1500:])
            continue
        v = snap["verdict"]
        g = gpu_means(snap)
        print("truth :", truth_line(kind, t))
        print("tuimon:", v["code"], "|", v["headline"], "|", v["evidence"], "|", v["confidence"])
        print("  next:", v["next_step"])
        print("  phases:", {p["name"]: p["share"] for p in snap.get("phases", [])}, "gpu:", snap.get("gpu"),
              "syncs:", snap.get("syncs"))
        print("  GPM now: SM", g.get("sm_active"), "tensor", g.get("tensor_active"), "DRAM", g.get("dram_bw"),
              "FP32", g.get("fp32_active"), "| memory:", snap.get("memory"))
        if kind in ("phases", "lightning", "python") and t:
            ph = {p["name"]: p["share"] for p in snap["phases"]}
            worst = max(abs(ph.get(n, 0) - t["shares"][n]) for n in t["shares"])
            print(f"  anatomy vs own timers: sum {sum(ph.values()):.4f}, worst phase diff {worst:.3f}")
        if r["capture"]:
            print("  capture:", " / ".join(r["capture"][-9:]))
    print("\n=== summary: planted class | its own truth | tuimon's verdict (confidence) | tuimon's evidence")
    for r in rows:
        snap = r["snap"]
        if "error" in snap:
            print(f"{r['kind']:<10} | {PLANTED_CLASS[r['kind']]:<34} | attach failed")
            continue
        v = snap["verdict"]
        print(f"{r['kind']:<10} | {PLANTED_CLASS[r['kind']]:<34} | {truth_line(r['kind'], r['truth'])} | "
              f"{v['headline']} ({v['confidence']}) | {v['evidence']}")


if __name__ == "__main__":
    main()
