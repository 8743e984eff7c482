"""Issue 22's proof on the GPU machine: the lines behind the time. Each planted loop
(tests/workloads/planted.py) under `tuimon run`, `attach --once --json` after ATTACH_AFTER_S beside
the loop's own timers: the verdict, its next step, the top hot line and its share against the
loop's own (hot_share, or the optimizer's share), the copies and ops counted; then a compiled model
with and without tuimon (torch._dynamo's counters, the job's output). Prints tables last.

    python3 tests/gpu/check_lines.py OUT_DIR [kind ...]
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from tests.compiled_output import counters, others  # noqa: E402

PLANTED = os.path.join(ROOT, "tests", "workloads", "planted.py")
COMPILED = os.path.join(ROOT, "tests", "workloads", "compiled.py")
PY = sys.executable
KINDS = ["copies", "outside", "optimizer", "hotspot", "wait"]
ATTACH_AFTER_S, RUN_S = 15, 24


def tuimon(*args, timeout=120, env=None):
    return subprocess.run([PY, "-m", "tuimon", *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=env)


def one(kind: str, out: str) -> dict:
    truth_path = os.path.join(out, f"{kind}.truth.json")
    job = subprocess.Popen([PY, "-m", "tuimon", "run", "--headless", "--", PY, PLANTED, kind, "--seconds", str(RUN_S),
                            "--device", "cuda", "--truth", truth_path], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    time.sleep(ATTACH_AFTER_S)
    a = tuimon("attach", job.pid, "--once", "--json", "--window", 2)
    rest = job.communicate(timeout=120)[0]
    snap = json.loads(a.stdout) if a.returncode == 0 and a.stdout.strip() else {"error": a.stderr}
    truth = json.load(open(truth_path)) if os.path.exists(truth_path) else {}
    with open(os.path.join(out, f"{kind}.attach.json"), "w") as f:
        json.dump(snap, f, indent=1)
    return {"kind": kind, "snap": snap, "truth": truth, "log": rest[-1500:]}


def row(r: dict) -> str:
    s, t = r["snap"], r["truth"]
    if "error" in s:
        return f"| {r['kind']} | error: {s['error'][:200]} | | | |"
    lines = sorted(s.get("hot_lines", []), key=lambda h: -h["share"])
    want = t.get("shares", {}).get("optimizer") if r["kind"] == "optimizer" else t.get("hot_share")
    phase = "optimizer" if r["kind"] == "optimizer" else None
    h = next((x for x in lines if phase is None or x["phase"] == phase), None)
    hot = f"{h['line'][:70]} {h['share']:.2f} ({h['phase']}; Python {h['python']:.0%}, native {h['native']:.0%}, " \
          f"blocked {h['waiting']:.0%})" if h else "none"
    truth = f"step {t.get('step_ms', 0):.1f} ms, its own share {want:.2f}" if want is not None else "n/a"
    extra = []
    if s.get("copies"):
        c = s["copies"]
        extra.append(f"copies {c['share']:.0%}: {c['h2d_mb']} MB/step, pageable {c['pageable']:.0%}")
    if s.get("ops"):
        extra.append(f"ops {s['ops']['total']} (step {s['ops']['step']}): {s['ops']['by_phase']}")
    v = s["verdict"]
    return (f"| {r['kind']} | {truth} | {v['headline']} | {hot} | {v['next_step'][:160]} | {'; '.join(extra)} |")


def compiled(out: str) -> list[str]:
    """A compiled model with and without tuimon: its dynamo counters and its own output (under
    `tuimon run` the job's output goes to a log of its own, named on tuimon's stderr)."""
    rows = []
    for backend, optimizer in (("eager", "eager"), ("inductor", "eager"), ("inductor", "compiled")):
        env = {**os.environ, "BACKEND": backend, "HOW": "wrap", "DEVICE": "cuda", "OPTIMIZER": optimizer}
        # each run compiles afresh (a cache of its own): a cache hit skips inductor's warnings
        plain = subprocess.run([PY, COMPILED], capture_output=True, text=True, timeout=300, cwd=ROOT,
                               env={**env, "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp()})
        probed = tuimon("run", "--plain", "--interval", "0.5", "--", PY, COMPILED, timeout=300,
                        env={**env, "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp()})
        log = re.search(r"its output goes to (\S+)\n", probed.stderr)
        job_out = open(log.group(1)).read() if log else "(no job log named)"

        plain_out = plain.stdout + plain.stderr
        last = [x for x in probed.stdout.splitlines() if x.startswith("pid ") and "phases" in x]
        same = "same" if others(job_out) == others(plain_out) else "DIFFERENT"
        rows.append(f"| {backend}, optimizer {optimizer} | {counters(plain_out)} | {counters(job_out)} | {same}: {len(others(plain_out))} vs "
                    f"{len(others(job_out))} lines | {(last[-1].split('phases', 1)[1][:60] if last else 'n/a')} |")
        with open(os.path.join(out, f"compiled-{backend}-{optimizer}.txt"), "w") as f:
            f.write(plain_out + "\n===== under tuimon, the job's log\n" + job_out + "\n===== tuimon\n" + probed.stdout + probed.stderr)
    return rows


def main():
    out = sys.argv[1]
    kinds = sys.argv[2:] or KINDS
    os.makedirs(out, exist_ok=True)
    results = [one(k, out) for k in kinds if k != "compiled"]
    comp = compiled(out) if (not sys.argv[2:] or "compiled" in kinds) else []
    print("\n| planted | the loop's own | tuimon's verdict | top hot line, share (its phase; how) | next step | copies, ops |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(row(r))
    if comp:
        print("\n| compiled (cuda) | counters without tuimon | with tuimon | the job's own output | phases |")
        print("| --- | --- | --- | --- | --- |")
        for x in comp:
            print(x)


if __name__ == "__main__":
    main()
