#!/usr/bin/env bash
# Issue 43, item 5 on the GPU machine: a loop that keeps every step's activations (+32 MiB a step,
# 200 ms steps) under a 7 GiB cap (set_per_process_memory_fraction) until CUDA runs out of memory
# (tests/workloads/present.py oom), under `tuimon run --headless`, polled every 2 s by `tuimon attach
# --once --json`: when the first memory-growth verdict came and when the job died. Done when it came
# >= 10 s before the death. Also: the same leak with no cap set (the device's memory is the cap:
# 512 MiB a step), and the loop without the leak for 60 s (a control: no memory-growth verdict).
# ~3 minutes on an H200. Prints a table last.
# On the GPU machine: source .gpu/activate.sh; OUT=$OUT bash tests/gpu/check_memory_growth.sh
source tests/gpu/prelude.sh
nvidia-smi -L
python3 - "$OUT/memory_growth" ${CASES:-capped device steady} <<'PY' 2>&1 | tee "$OUT/memory_growth.log"
import json, os, subprocess, sys, threading, time

out, cases = sys.argv[1], sys.argv[2:]
os.makedirs(out, exist_ok=True)
PY = sys.executable
CAP_GIB = float(os.environ.get("CAP_GIB", 7))
import torch  # (the device's memory, for the fraction; the monitor itself never imports torch)
TOTAL = torch.cuda.get_device_properties(0).total_memory
SETUPS = {  # name: (present.py oom arguments, seconds at most)
    "capped": (["--fraction", f"{CAP_GIB * 2**30 / TOTAL:.6f}", "--mib", "32", "--step-ms", "200"], 180),
    "device": (["--mib", "512", "--step-ms", "200"], 240),
    "steady": (["--mib", "0", "--step-ms", "200"], 60),
}


def attach_once(pid):
    p = subprocess.run([PY, "-m", "tuimon", "attach", str(pid), "--once", "--json"], capture_output=True, text=True,
                       timeout=60)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {"error": (p.stderr or p.stdout)[-300:]}


def run(name):
    args, seconds = SETUPS[name]
    truth = os.path.join(out, f"{name}.truth.json")
    log = open(os.path.join(out, f"{name}.out"), "w")
    t0 = time.monotonic()
    job = subprocess.Popen([PY, "-m", "tuimon", "run", "--headless", "--", PY, "tests/workloads/present.py", "oom",
                            "--truth", truth, *args], stdout=log, stderr=subprocess.STDOUT)
    died = {}
    threading.Thread(target=lambda: died.update(at=(job.wait(), time.monotonic())[1]), daemon=True).start()
    polls, seen = [], os.path.join(out, f"{name}.polls.jsonl")
    with open(seen, "w") as f:
        while job.poll() is None and time.monotonic() - t0 < seconds:
            asked = time.monotonic()
            doc = attach_once(job.pid)
            v, m = doc.get("verdict") or {}, doc.get("memory") or {}
            row = {"t": round(time.monotonic() - t0, 2), "asked": round(asked - t0, 2), "steps": doc.get("steps"),
                   "code": v.get("code"), "headline": v.get("headline"), "evidence": v.get("evidence"),
                   "allocated": m.get("allocated"), "limit": m.get("limit"), "total": m.get("total"),
                   "growth": m.get("growth"), "error": doc.get("error")}
            polls.append(row)
            f.write(json.dumps(row) + "\n")
            time.sleep(max(0.0, asked + 2.0 - time.monotonic()))
    if job.poll() is None:
        job.kill()
    job.wait(30)
    time.sleep(0.2)
    death = died.get("at")
    try:
        steps = json.load(open(truth)).get("steps")
    except (OSError, ValueError):
        steps = None
    tail = open(os.path.join(out, f"{name}.out")).read().strip().splitlines()
    oom = next((line for line in reversed(tail) if "OutOfMemoryError" in line), None)
    first = next((p for p in polls if p["code"] == "memory-growth"), None)
    before = {}
    for p in polls[: polls.index(first) if first else len(polls)]:
        before[p["code"]] = before.get(p["code"], 0) + 1
    return {"case": name, "args": " ".join(args), "first": first, "death": None if death is None else death - t0,
            "code": job.returncode, "steps": steps, "oom": oom, "before": before, "polls": len(polls),
            "growth_polls": sum(p["code"] == "memory-growth" for p in polls)}


rows = [run(c) for c in cases]
print("\n=== table: the first memory-growth verdict and the OOM death, seconds from the job's start")
print(f"{'case':8} {'first memory-growth':>20} {'OOM death':>10} {'lead':>7} {'>= 10 s':>7}  exit, steps, polls")
for r in rows:
    first, death = r["first"], r["death"]
    lead = death - first["t"] if first and death is not None and r["oom"] else None
    ok = "-" if r["case"] == "steady" else ("yes" if lead is not None and lead >= 10 else "NO")
    print(f"{r['case']:8} {first['t'] if first else 'none':>20} "
          f"{(f'{death:.1f}' if death is not None and r['oom'] else 'none'):>10} "
          f"{(f'{lead:.1f}' if lead is not None else '-'):>7} {ok:>7}  {r['code']}, {r['steps']} steps, "
          f"{r['polls']} polls ({r['growth_polls']} memory-growth)")
for r in rows:
    print(f"\n{r['case']} (present.py oom {r['args']}): verdicts before the first warning {r['before']}")
    if r["first"]:
        f = r["first"]
        print(f"  first: {f['headline']} | {f['evidence']}")
        print(f"  numbers: allocated {f['allocated']}, limit {f['limit']}, total {f['total']}, growth {f['growth']}")
    print(f"  death: {r['oom'] or 'no OutOfMemoryError in its output'}"[:400])
PY
