#!/usr/bin/env bash
# Issue 43, item 2 on a GPU machine with 2+ GPUs: torchvision's ImageNet example shaped loop
# (tests/workloads/data_parallel.py: ResNet-50 in torch.nn.DataParallel over every visible GPU, dummy
# data, batch 256; a plain-torch ResNet-50 where torchvision does not import), run plainly and under
# `tuimon run --headless` in alternating pairs (plain first, then tuimon first: ABBA), each timed by
# the loop itself after its warm-up. Under tuimon, `tuimon attach --once --json` ~20 s after the warm-up:
# the verdict (done when "DataParallel" and DistributedDataParallel are in it), tuimon's DataParallel
# shares beside the loop's own timers over the same steps, the replicas' GPU time (CUDA events on
# their own streams) and the GPU share from the loop's stream (done when unknown: null).
# Lines of the table are appended to $OUT/data_parallel.txt as they come. ~4 minutes with 2 pairs.
# On the GPU machine: source .gpu/activate.sh; OUT=$OUT bash tests/gpu/check_data_parallel.sh
# (PAIRS=2, SECONDS_=30 seconds timed per run, BATCH=256, WORKERS=4, ATTACH_AFTER=20, WARMUP=15 steps;
# HZ0=1: a third arm per pair, tuimon without its line sampler (TUIMON_SAMPLE_HZ=0), ~+50 s a pair;
# DEVICE=cpu only for a smoke test of the script: DataParallel then calls the module, no parts)
source tests/gpu/prelude.sh
nvidia-smi -L
python3 - "$OUT" <<'PY' 2>&1 | tee "$OUT/data_parallel.log"
import json, os, subprocess, sys, time

out = sys.argv[1]
PY = sys.executable
PAIRS, SECONDS = int(os.environ.get("PAIRS", 2)), float(os.environ.get("SECONDS_", 30))
BATCH, WORKERS = os.environ.get("BATCH", "256"), os.environ.get("WORKERS", "4")
ATTACH_AFTER = float(os.environ.get("ATTACH_AFTER", 20))
HZ0 = os.environ.get("HZ0") == "1"  # a third arm: tuimon with TUIMON_SAMPLE_HZ=0 (+~50 s a pair)
EXTRA = ["--warmup", os.environ.get("WARMUP", "15"), "--device", os.environ.get("DEVICE", "cuda")]  # (cpu: a smoke test)
TABLE = os.path.join(out, "data_parallel.txt")
open(TABLE, "w").close()
started = time.monotonic()


def say(line=""):
    """A line of the table, on stdout and appended to $OUT/data_parallel.txt at once."""
    print(line, flush=True)
    with open(TABLE, "a") as f:
        f.write(line + "\n")


def pct(v):
    return "n/a" if v is None else f"{100 * v:.1f}%"


def run(arm, k):
    name = f"dp-{k}-{arm}"
    steps_log = os.path.join(out, f"{name}.steps")
    job_out = open(os.path.join(out, f"{name}.out"), "w")
    cmd = [PY, "tests/workloads/data_parallel.py", "--seconds", str(SECONDS), "--batch", BATCH, "--workers", WORKERS,
           "--step-log", steps_log, *EXTRA]
    env = dict(os.environ)
    if arm != "plain":
        cmd = [PY, "-m", "tuimon", "run", "--headless", "--", *cmd]
    if arm == "hz0":  # the probe without its line sampler (parked in the replicas' join; this arm says what it costs)
        env["TUIMON_SAMPLE_HZ"] = "0"
    job = subprocess.Popen(cmd, stdout=job_out, stderr=subprocess.STDOUT, env=env)
    doc, asked = None, None
    if arm == "tuimon":
        log = os.path.join(out, f"{name}.out")
        deadline = time.monotonic() + 240
        while job.poll() is None and time.monotonic() < deadline and "warm" not in open(log).read():
            time.sleep(0.5)
        time.sleep(ATTACH_AFTER)
        if job.poll() is None:
            asked = time.monotonic()
            p = subprocess.run([PY, "-m", "tuimon", "attach", str(job.pid), "--once", "--json"], capture_output=True,
                               text=True, timeout=90)
            with open(os.path.join(out, f"{name}.attach.json"), "w") as f:
                f.write(p.stdout or p.stderr)
            try:
                doc = json.loads(p.stdout)
            except ValueError:
                doc = {"error": (p.stderr or p.stdout)[-300:]}
    try:
        job.wait(SECONDS + 300)
    except subprocess.TimeoutExpired:
        job.kill()
        job.wait()
    text = open(os.path.join(out, f"{name}.out")).read()
    result = json.loads(text.split("RESULT ", 1)[1].splitlines()[0]) if "RESULT " in text else {}
    return {"arm": arm, "code": job.returncode, "result": result, "doc": doc, "asked": asked, "steps_log": steps_log,
            "tail": text.strip().splitlines()[-3:]}


def own_shares(steps_log, asked, n):
    """The loop's own part shares over its last n steps before the attach (tuimon's window)."""
    rows = []
    for line in open(steps_log):
        f = line.split()
        if len(f) == 6 and (asked is None or float(f[0]) <= asked):
            rows.append([float(x) for x in f[1:]])
    rows = rows[-n:] if n else rows
    total = sum(r[0] for r in rows)
    if not total:
        return None
    return {"replicate": sum(r[1] for r in rows) / total, "scatter+gather": (sum(r[2] for r in rows)
            + sum(r[4] for r in rows)) / total, "parallel_apply": sum(r[3] for r in rows) / total, "steps": len(rows)}


say(f"DataParallel check: {PAIRS} pairs, {SECONDS:.0f} s timed per run, batch {BATCH}, {WORKERS} workers")
say("pair  arm     exit  steps  images/s  step ms  of plain's (in this pair, so far)")
pairs = []
for k in range(1, PAIRS + 1):
    order = ["plain", "tuimon"] + (["hz0"] if HZ0 else [])
    order = order if k % 2 else order[::-1]
    got = {}
    for arm in order:
        r = got[arm] = run(arm, k)
        res = r["result"]
        ratio = ""
        if "plain" in got and len(got) >= 2:
            ratio = "; ".join(f"{a} {got[a]['result']['images_per_s'] / got['plain']['result']['images_per_s']:.3f}"
                              for a in got if a != "plain" and got[a]["result"].get("images_per_s")
                              and got["plain"]["result"].get("images_per_s"))
        ips, ms = res.get("images_per_s"), res.get("step_ms")
        say(f"{k:>4}  {arm:6}  {r['code']:>4}  {res.get('steps', '-'):>5}  "
            f"{(f'{ips:.0f}' if ips else 'n/a'):>8}  {(f'{ms:.1f}' if ms else 'n/a'):>7}  {ratio:>12}"
            + ("" if res else f"  (no RESULT: {' | '.join(r['tail'])[:200]})"))
    pairs.append(got)
for arm in ("tuimon", "hz0") if HZ0 else ("tuimon",):
    ratios = [p[arm]["result"]["images_per_s"] / p["plain"]["result"]["images_per_s"] for p in pairs
              if p["plain"]["result"].get("images_per_s") and p[arm]["result"].get("images_per_s")]
    if ratios:
        say(f"throughput under {arm} / plain, per pair: {', '.join(f'{x:.3f}' for x in ratios)} "
            f"(mean {sum(ratios) / len(ratios):.3f}; the budget: >= 0.99)")
say(f"model: {pairs[0]['plain']['result'].get('model')}, DataParallel on {pairs[0]['plain']['result'].get('devices')} GPUs")
say()
say("What tuimon said (attach --once --json, ~%.0f s after the warm-up), beside the loop's own timers:" % ATTACH_AFTER)
for k, p in enumerate(pairs, 1):
    t = p["tuimon"]
    d = t["doc"] or {}
    if not d or "error" in d:
        say(f"pair {k}: no attach document: {d.get('error') if d else 'the job ended first'}")
        continue
    v = d.get("verdict") or {}
    dp = d.get("data_parallel") or {}
    gpu = d.get("gpu")
    own = own_shares(t["steps_log"], t["asked"], d.get("window_steps") or 0)
    sm = [g.get("sm_active") for g in d.get("gpus") or []]
    say(f"pair {k}: verdict {v.get('code')}: {v.get('headline')}")
    say(f"  evidence: {v.get('evidence')}")
    say(f"  next step: {(v.get('next_step') or '')[:160]}")
    ok = "DataParallel" in (v.get("headline") or "") and "DistributedDataParallel" in (v.get("next_step") or "")
    say(f"  DataParallel named with DistributedDataParallel: {'yes' if ok else 'NO'}")
    say(f"  {'part':16} {'tuimon':>8} {'the loop':>9}   (window {d.get('window_steps')} steps; "
        f"the loop's last {own['steps'] if own else 0} before the attach)")
    say(f"  {'replicate':16} {pct(dp.get('replicate_share')):>8} {pct(own and own['replicate']):>9}")
    say(f"  {'scatter+gather':16} {pct(dp.get('scatter_gather_share')):>8} {pct(own and own['scatter+gather']):>9}")
    say(f"  {'parallel_apply':16} {pct(dp.get('apply_share')):>8} {pct(own and own['parallel_apply']):>9}")
    say(f"  replicas' GPU time (events on their streams): {dp.get('gpu_ms')} ms over {dp.get('gpu_steps')} steps; "
        f"GPU share from the loop's stream: {None if gpu is None else gpu.get('busy_share')} (null: unknown, as "
        f"it should be); SM activity per GPU (NVML/GPM): {sm}; step source {d.get('step_source')}, "
        f"steps {d.get('steps')}")
say()
say(f"total {time.monotonic() - started:.0f} s")
PY
