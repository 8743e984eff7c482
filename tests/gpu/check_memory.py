"""Issue 24's proof on the GPU machine (GPU memory): each case under `tuimon run --headless`,
watched by a monitor in this process (the session and state the TUI uses) beside the loop's own
truth (tests/workloads/memory.py). Prints a table last.

    python3 tests/gpu/check_memory.py OUT_DIR [CASE...]      (default: every case, ~3.5 min on an H100)

CASE:
  retry        a planted allocator-retry pattern under a per-process cap of 8 GiB: named memory
               pressure, with tuimon's retries per step beside the loop's own num_alloc_retries
               over the same steps (the issue's bar: within 10%)
  expandable   the same loop with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: not named
  oom          activations kept until CUDA runs out (about step 20): EXITED, the OOM message and
               the allocator's last gauges
  capture      `tuimon capture PID --memory --steps 5` of a small transformer: the pickle read by
               torch.cuda._memory_viz (segsum, trace_plot), the largest live allocations at the
               peak beside the tensors autograd saved (the model's activations), and the window's
               cost from the job's own step times
  bench        what recording the allocator's history costs one allocation, per setting, and the
               cost of memory_stats() and reset_peak_memory_stats() (a per-phase peak's price)
"""

import json
import os
import pickle
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from tuimon.capture import memory_summary  # noqa: E402
from tuimon.monitor.session import LiveSession  # noqa: E402
from tuimon.monitor.state import MonitorState  # noqa: E402

PY = sys.executable
WORKLOAD = os.path.join(ROOT, "tests", "workloads", "memory.py")
MIB = 2**20


def start(out, name, argv, env=None):
    log = open(os.path.join(out, f"{name}.out"), "w")
    return subprocess.Popen([PY, "-m", "tuimon", "run", "--headless", "--", PY, WORKLOAD, *argv], stdout=log,
                            stderr=subprocess.STDOUT, cwd=ROOT, env=env)


def truth(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def watch(job, seconds, until=None, every=1.0):
    """Poll as the TUI does; returns [(monotonic, view)], stopping at until(view) or after seconds."""
    session, state, seen = LiveSession(job.pid, every), MonitorState(), []
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end and job.poll() is None:
            state.apply(session.poll())
            view = state.view()
            seen.append((time.monotonic(), view))
            if until is not None and until(view):
                break
            time.sleep(every)
        if job.poll() is not None:  # (the cycle that sees it gone)
            time.sleep(every)
            state.apply(session.poll())
            seen.append((time.monotonic(), state.view()))
    finally:
        session.stop()
    return seen


def spanned(v, steps=80):
    m = v.training.memory if v.training else None
    return m is not None and m.retries_per_step is not None and m.retries_to - m.retries_from >= steps


def case_retry(out, expandable=False):
    name = "expandable" if expandable else "retry"
    t = os.path.join(out, f"{name}.truth.json")
    env = dict(os.environ)
    if expandable:
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    job = start(out, name, ["retry", "--seconds", "90", "--cap", "8", "--truth", t], env=env)
    if expandable:  # (a fixed time: nothing to wait for)
        seen = watch(job, 45)
    else:
        seen = watch(job, 75, until=lambda v: v.verdict.code == "memory-pressure" and spanned(v))
    job.kill()
    job.wait(30)
    tr = truth(t)
    done = tr.get("retries", [])
    last = next((v for _, v in reversed(seen) if spanned(v, 20)), seen[-1][1] if seen else None)
    m = last.training.memory if last is not None and last.training else None
    codes = [v.verdict.code for _, v in seen]
    named = sum(c == "memory-pressure" for c in codes)
    if m is not None and m.retries_per_step is not None and len(done) >= m.retries_to - 1 and m.retries_from >= 2:
        own = (done[m.retries_to - 2] - done[m.retries_from - 2]) / (m.retries_to - m.retries_from)
        err = (m.retries_per_step - own) / own if own else float("nan")
        mine = f"{m.retries_per_step:.3f}/step over steps {m.retries_from}..{m.retries_to}"
        theirs = f"{own:.3f}/step over the same steps"
        off = f"{err:+.1%}" if own else "n/a (no retries)"
    else:
        mine, theirs, off = "not measured", "n/a", "n/a"
    whole = f"{(done[-1] - done[0]) / (len(done) - 1):.3f}/step over its {len(done)} steps" if len(done) > 1 else "n/a"
    v = last.verdict if last is not None else None
    return {"case": name, "truth": f"num_alloc_retries: {theirs}; {whole}",
            "tuimon": f"{v.code}: {v.headline} | {v.evidence}" if v else "n/a",
            "detail": f"tuimon {mine}: {off} · named memory pressure in {named} of {len(codes)} cycles; "
                      f"verdicts {sorted(set(codes))}" + (f" · next: {v.next_step}" if v and not expandable else "")}


def case_oom(out):
    t = os.path.join(out, "oom.truth.json")
    job = start(out, "oom", ["oom", "--steps", "20", "--truth", t])
    seen = watch(job, 120, until=lambda v: v.verdict.code == "exited")
    job.wait(30)
    _, v = seen[-1]
    return {"case": "oom", "truth": f"{truth(t).get('steps')} steps, exit code {job.returncode}",
            "tuimon": f"{v.verdict.code}: {v.verdict.headline} | {v.verdict.evidence}",
            "detail": f"next: {v.verdict.next_step}"}


def case_capture(out):
    t = os.path.join(out, "capture.truth.json")
    env = dict(os.environ, TUIMON_CAPTURE_DIR=os.path.join(out, "captures"))
    job = start(out, "capture", ["model", "--seconds", "240", "--truth", t], env=env)
    try:
        end = time.monotonic() + 90
        while time.monotonic() < end and truth(t).get("steps", 0) < 25:
            time.sleep(0.5)
        p = subprocess.run([PY, "-m", "tuimon", "capture", str(job.pid), "--memory", "--steps", "5", "--wait",
                            "--json", "--timeout", "180"], capture_output=True, text=True, cwd=ROOT, env=env,
                           timeout=240)
        with open(os.path.join(out, "capture.cli.txt"), "w") as f:
            f.write(p.stderr + "\n" + p.stdout)
    finally:
        job.kill()
        job.wait(30)
    if p.returncode != 0:
        return {"case": "capture", "truth": "", "tuimon": f"tuimon capture failed ({p.returncode})",
                "detail": p.stderr.strip()[-400:]}
    st = json.loads(p.stdout)
    tr = truth(t)
    import torch.cuda._memory_viz as viz  # (the viewer's own code: this script may import torch, the monitor never)

    with open(st["summary"]["file"], "rb") as f:
        data = pickle.load(f)
    segsum = viz.segsum(data).splitlines()
    html = viz.trace_plot(data)
    s = memory_summary.summarize(data)
    attention = tr.get("attention_bytes")
    saved = tr.get("saved", [])
    top = [a["size"] for a in s["largest"][:4]]
    lines = {f"memory.py:{n}" for n in tr.get("lines", [])}
    attention_groups = [g for g in s["groups"] if any(g["where"].startswith(x + " ") for x in lines)]
    steps = tr.get("step_ms", [])
    cost = st.get("cost") or {}
    return {"case": "capture",
            "truth": f"saved for backward (one step): {', '.join(f'{n / MIB:.0f} MiB x{k}' for n, k in saved[:4])}; "
                     f"attention B*H*T*T fp32 = {attention / MIB:.0f} MiB" if attention else "n/a",
            "tuimon": f"largest live at the peak: {', '.join(f'{x / MIB:.0f} MiB' for x in top)}; match: "
                      f"{bool(saved) and top[0] == saved[0][0]}; by line: "
                      + "; ".join(f"{g['where']} {g['bytes'] / MIB:.0f} MiB x{g['count']}" for g in s["groups"][:4])
                      + f" · attention lines named: {bool(attention_groups)}",
            "detail": f"{st['message']} · _memory_viz.segsum: "
                      f"{'; '.join(x for x in segsum if x.startswith(('segments:', 'total_')))}, trace_plot {len(html) / MIB:.1f} MiB "
                      f"of HTML · cost: worst step {cost.get('worst_ms')} ms = {cost.get('ratio')}x the worst normal "
                      f"({cost.get('worst_normal_ms')} ms; budget 1.2x), {cost.get('lost_ms')} ms lost · job's step "
                      f"median {sorted(steps)[len(steps) // 2] if steps else 'n/a'} ms"}


def case_bench(out):
    t = os.path.join(out, "bench.truth.json")
    p = subprocess.run([PY, WORKLOAD, "bench", "--truth", t], capture_output=True, text=True, cwd=ROOT, timeout=300)
    b = truth(t).get("bench", {})
    return {"case": "bench", "truth": "", "tuimon": "; ".join(f"{k}: {v}" for k, v in b.items() if "us" not in k
                                                                and ":" not in k and k != "off")
            + (f" (us per alloc+free; off: {b.get('off')})" if b else p.stderr[-300:]),
            "detail": "; ".join(f"{k}: {v}" for k, v in b.items() if ":" in k or k.endswith("us"))}


CASES = {"retry": case_retry, "expandable": lambda out: case_retry(out, expandable=True), "oom": case_oom,
         "capture": case_capture, "bench": case_bench}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/out/memory"
    names = sys.argv[2:] or list(CASES)
    os.makedirs(out, exist_ok=True)
    rows = []
    for c in names:
        t0 = time.monotonic()
        try:
            row = CASES[c](out)
        except Exception as e:  # noqa: BLE001 - one case's failure is a row, the rest still run
            row = {"case": c, "truth": "", "tuimon": f"the check failed: {type(e).__name__}: {e}", "detail": ""}
        row["s"] = round(time.monotonic() - t0)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| case | the loop's truth | tuimon | detail | s |\n| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['case']} | {r['truth']} | {r['tuimon']} | {r['detail']} | {r['s']} |")


if __name__ == "__main__":
    main()
