#!/usr/bin/env bash
# Issues 40 and 43 on real jobs nobody at tuimon wrote, on a machine with 2 GPUs.
# A (issue 40: the probe loaded into a running job, no restart): each job once plainly, then once with
#   `tuimon inject PID` INJECT_AT s after its start and `tuimon attach PID --once --json` ATTACH_AFTER s
#   after the inject (ONE pair per job, plain first): the inject's exit code and time, the verdict, steps,
#   the step source, the ranks shown, and the job's throughput after the inject beside the plain run's
#   over the same span (the job's own timer), and the job's exit code (0 both ways, but for imagenet: cut).
#   - hf: tests/workloads/hf_trainer.py (a Hugging Face Trainer, small GPT-2 from GPT2Config on random
#     tokens; with 2 GPUs the Trainer wraps it in torch.nn.DataParallel itself); its callback's step ends.
#   - imagenet: torchvision's ImageNet example as it is (.whl2/imagenet_main.py, not in git) with
#     --dummy -a resnet50 -b 256 -j 4 (DataParallel over every visible GPU), cut with SIGINT after its
#     time (expected: the epoch is 5005 batches); throughput from its own printed `Time` averages.
#   - ddp: a 2-rank DDP job under torchrun (NCCL; gloo with DEVICE=cpu), injected through the launcher's
#     PID (tuimon inject follows it to the ranks); its truth: each rank's median step of the last 100.
# B (issue 43, done when: HF Trainer with 2 visible GPUs, throughput under tuimon within 1% of plain):
#   - trainer-run: hf_trainer.py plainly and under `tuimon run --headless` in each of ARMS (default
#     "tuimon"; others turn parts of the probe off: ARM_SETTINGS below), PAIRS rounds, the arms in turn and
#     reversed every other round; the callback's samples/s after its warm-up; each arm's ratio to the
#     round's plain run, per round and their mean.
# Lines of the table are appended to $OUT/real_jobs.txt as they come (the run may be cut).
# ~8 minutes with the defaults on 2 H200s (each run ~35-50 s with its imports).
# On the GPU machine: source .gpu/activate.sh; OUT=$OUT bash tests/gpu/check_real_jobs.sh
# (carry .whl2: torchvision, pillow, transformers, accelerate and their deps, installed here into
# /tmp/site2 when transformers or torchvision does not import; numpy is not among them.)
# Knobs: SECONDS_=30 (timed seconds per run; part A's jobs run at least INJECT_AT + ATTACH_AFTER),
# PAIRS=2 (part B's rounds), ARMS="tuimon" (part B), JOBS="hf imagenet ddp trainer-run", INJECT_AT=20, ATTACH_AFTER=15,
# IMAGENET_MAIN=.whl2/imagenet_main.py, DEVICE=cpu (a smoke test: gloo, tiny sizes, no imagenet
# without torchvision; the numbers then mean nothing).
source tests/gpu/prelude.sh
if ls .whl2/*.whl >/dev/null 2>&1 && ! python3 -c "import transformers, accelerate, torchvision" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site2 .whl2/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site2 || echo "pip install of .whl2 failed: see above"
fi
nvidia-smi -L 2>/dev/null || echo "(no nvidia-smi)"
python3 - "$OUT/real_jobs" ${JOBS:-hf imagenet ddp trainer-run} <<'PY' 2>&1 | tee "$OUT/real_jobs.log"
import json, os, re, signal, subprocess, sys, threading, time

out, jobs = sys.argv[1], sys.argv[2:]
os.makedirs(out, exist_ok=True)
PY = sys.executable
DEVICE = os.environ.get("DEVICE", "cuda")
CPU = DEVICE == "cpu"
SECONDS = float(os.environ.get("SECONDS_", 30))
PAIRS = int(os.environ.get("PAIRS", 2))
INJECT_AT, ATTACH_AFTER = float(os.environ.get("INJECT_AT", 20)), float(os.environ.get("ATTACH_AFTER", 15))
SECONDS_A = max(SECONDS, INJECT_AT + ATTACH_AFTER)  # (alive at the attach, whatever its start-up took)
IMAGENET = os.environ.get("IMAGENET_MAIN", ".whl2/imagenet_main.py")
HF_ARGS = (["--layers", "2", "--embd", "64", "--heads", "2", "--vocab", "1024", "--seq", "64", "--batch", "8",
            "--warmup", "5", "--device", "cpu"] if CPU else ["--device", "cuda"])
IMAGENET_ARGS = (["-a", "resnet18", "-b", "8", "-j", "1", "--print-freq", "2"] if CPU
                 else ["-a", "resnet50", "-b", "256", "-j", "4", "--print-freq", "10"])
TABLE = os.path.join(os.path.dirname(out), "real_jobs.txt")
open(TABLE, "w").close()
started = time.monotonic()


def say(line=""):
    """A line of the table, on stdout and appended to $OUT/real_jobs.txt at once."""
    print(line, flush=True)
    with open(TABLE, "a") as f:
        f.write(line + "\n")


def versions():
    code = ("import importlib, sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, "
            "'cuda devices', torch.cuda.device_count() if torch.cuda.is_available() else 0)\n"
            "for m in ('transformers', 'accelerate', 'torchvision', 'numpy', 'PIL'):\n"
            "    try: print(m, getattr(importlib.import_module(m), '__version__', '?'))\n"
            "    except Exception as e: print(m, 'MISSING', type(e).__name__, str(e)[:80])")
    try:
        p = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120)
        return (p.stdout + p.stderr).strip().splitlines()
    except subprocess.TimeoutExpired:
        return ["(versions: timed out)"]


class Job:
    """A process (its own session), its output teed to a file with each line's arrival time."""

    def __init__(self, name, cmd, env=None):
        self.name, self.lines = name, []  # (time.monotonic(), line)
        self.cut = self.killed = False
        self.log = open(os.path.join(out, f"{name}.out"), "w")
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                  start_new_session=True, env=env)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))
            self.log.write(line)
            self.log.flush()

    def alive(self):
        return self.p.poll() is None

    def sleep_until(self, t):
        while self.alive() and time.monotonic() < t:
            time.sleep(0.2)

    def finish(self, limit, cut_at=None):
        """Wait for the end (SIGINT at cut_at, as a user's ^C); past limit, the whole group killed."""
        cut = False
        if cut_at is not None:
            self.sleep_until(cut_at)
            if self.alive():
                cut = True
                os.kill(self.p.pid, signal.SIGINT)
        try:
            self.p.wait(max(1.0, self.t0 + limit - time.monotonic()) if cut_at is None else 30)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()
            self.killed = True
        self.reader.join(5)
        self.log.close()
        self.cut = cut
        return self.p.returncode

    def text(self):
        return "\n".join(line for _, line in self.lines)

    def tail(self, n=2):
        return " | ".join(line for _, line in self.lines[-n:])[-200:]


def tuimon(*args, timeout=90):
    t = time.monotonic()
    try:
        p = subprocess.run([PY, "-m", "tuimon", *args], capture_output=True, text=True, timeout=timeout)
        return p.returncode, time.monotonic() - t, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        return "timeout", time.monotonic() - t, e.stdout or "", e.stderr or ""


def result_line(text):
    m = re.findall(r"^RESULT (\{.*\})$", text, re.M)
    return json.loads(m[-1]) if m else {}


# --- the jobs: a command, and the job's own throughput (unit, a function of the run and a window) ---------
def hf_cmd(name, seconds):
    return [PY, "tests/workloads/hf_trainer.py", "--seconds", str(seconds), "--step-log",
            os.path.join(out, f"{name}.steps"), *HF_ARGS]


def step_ends(name):
    try:
        return [float(x) for x in open(os.path.join(out, f"{name}.steps")).read().split()]
    except (OSError, ValueError):
        return []


def hf_rate(run, offset):
    """samples/s over the steps from `offset` s after the end of the warm-up's last step (None: all after it)."""
    res = result_line(run["job"].text())
    warm = int(HF_ARGS[HF_ARGS.index("--warmup") + 1]) if "--warmup" in HF_ARGS else 20
    ends = step_ends(run["name"])[warm:]
    if len(ends) < 2 or not res.get("batch"):
        return None, f"{len(ends)} steps after warm-up"
    a = ends[0] + (offset or 0.0)
    inside = [e for e in ends if e >= a]
    if len(inside) < 2:
        return None, "too few steps in the window"
    return (len(inside) - 1) / (inside[-1] - inside[0]) * res["batch"], f"{len(inside) - 1} steps"


IMAGENET_LINE = re.compile(r"Epoch: \[\d+\]\[\s*(\d+)/\d+\]\s+Time\s+([\d.]+)\s+\(\s*([\d.]+)\)")


def imagenet_points(run):
    """(arrival, batch index, running mean batch time s) of each printed progress line."""
    return [(t, int(m[1]), float(m[3])) for t, line in run["job"].lines if (m := IMAGENET_LINE.search(line))]


def imagenet_window(points, lo, hi):
    """Mean batch time between two printed batch indices, from the example's running averages."""
    by = {i: avg for _, i, avg in points}
    if lo not in by or hi not in by or hi <= lo:
        return None
    return (by[hi] * (hi + 1) - by[lo] * (lo + 1)) / (hi - lo)


def ddp_rate(run):
    """steps/s from the ranks' truth (each rank's median step of its last 100 steps; the slowest rank's)."""
    d = run["truth"]
    docs = []
    for r in (0, 1):
        try:
            docs.append(json.load(open(os.path.join(d, f"rank{r}.json"))))
        except (OSError, ValueError):
            pass
    if not docs:
        return None, "no truth"
    ms = max(x["step_ms"] for x in docs)
    return 1e3 / ms, f"{len(docs)} ranks' truth, {min(x['steps'] for x in docs)} steps, median of last 100"


def start(job, arm):
    name = f"{job}-{arm}"
    run = {"name": name, "arm": arm}
    if job == "hf":
        cmd = hf_cmd(name, SECONDS_A)
    elif job == "imagenet":
        cmd = [PY, IMAGENET, "--dummy", *IMAGENET_ARGS, "--epochs", "1"]
    else:  # ddp
        run["truth"] = os.path.join(out, f"{name}.truth")
        os.makedirs(run["truth"], exist_ok=True)
        cmd = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "tests/workloads/ddp.py",
               "--device", DEVICE, "--seconds", str(SECONDS_A), "--truth", run["truth"]]
    run["job"] = Job(name, cmd)
    return run


def run_a(job, arm):
    run = start(job, arm)
    j = run["job"]
    if arm == "inject":
        j.sleep_until(j.t0 + INJECT_AT)
        if j.alive():
            run["inject_start"] = time.monotonic()
            rc, took, _, err = tuimon("inject", str(j.p.pid), timeout=120)
            run["inject"] = (rc, took, err.strip().splitlines())
            run["inject_end"] = time.monotonic()
            j.sleep_until(run["inject_end"] + ATTACH_AFTER)
            if j.alive():
                rc, _, so, se = tuimon("attach", str(j.p.pid), "--once", "--json", timeout=120)
                with open(os.path.join(out, f"{run['name']}.attach.json"), "w") as f:
                    f.write(so or se)
                try:
                    run["doc"] = json.loads(so)
                except ValueError:
                    run["doc"] = {"error": f"attach rc {rc}: {(se or so).strip()[-200:]}"}
            else:
                run["doc"] = {"error": "the job ended before the attach"}
        else:
            run["doc"] = {"error": "the job ended before the inject"}
    if job == "imagenet":  # one epoch is 5005 batches: cut at its time, as a user's ^C (expected)
        run["code"] = j.finish(SECONDS_A + 180, cut_at=j.t0 + SECONDS_A + 15)
    else:
        run["code"] = j.finish(SECONDS_A + 240)
    return run


def rate_pair(job, plain, inj):
    """(plain's, injected's) throughput after the inject over the same span, the unit, and a note."""
    if job == "hf":
        offset = None
        ends = step_ends(inj["name"])
        warm = int(HF_ARGS[HF_ARGS.index("--warmup") + 1]) if "--warmup" in HF_ARGS else 20
        if inj.get("inject_end") and len(ends) > warm:
            offset = max(0.0, inj["inject_end"] + 2 - ends[warm])
        (p, pn), (i, inn) = hf_rate(plain, offset), hf_rate(inj, offset)
        return p, i, "samples/s", f"from {offset or 0:.0f} s after the warm-up's end: plain {pn}, injected {inn}"
    if job == "imagenet":
        pp, ip = imagenet_points(plain), imagenet_points(inj)
        after = [i for t, i, _ in ip if t >= inj.get("inject_end", 0) + 2]
        if len(after) < 2 or not pp:
            return None, None, "images/s", f"too few printed lines (plain {len(pp)}, injected {len(ip)}, after {len(after)})"
        lo, hi = after[0], min(after[-1], pp[-1][1])
        bs = int(IMAGENET_ARGS[IMAGENET_ARGS.index("-b") + 1])
        tp, ti = imagenet_window(pp, lo, hi), imagenet_window(ip, lo, hi)
        return (bs / tp if tp else None), (bs / ti if ti else None), "images/s", f"batches {lo}..{hi} (its Time averages)"
    (p, pn), (i, inn) = ddp_rate(plain), ddp_rate(inj)
    return p, i, "steps/s", f"plain: {pn}; injected: {inn}"


def verdict_cells(run):
    d = run.get("doc") or {}
    if "error" in d:
        return "-", "-", "-", "-", d["error"]
    v = d.get("verdict") or {}
    ranks = d.get("ranks") or []
    steps = d.get("steps")
    if ranks:
        steps = "/".join(str(r.get("steps")) for r in ranks)
    return v.get("code", "-"), steps, d.get("step_source") or "-", len(ranks), v.get("headline") or ""


def exit_cell(run):
    j = run["job"]
    if j.cut:
        return f"cut:{run['code']}"
    return ("killed:" if j.killed else "") + str(run["code"])


def fmt(x, unit):
    return "n/a" if x is None else f"{x:.2f}" if unit == "steps/s" and x < 100 else f"{x:.0f}"


def own_summary(job, run):
    """The plain run's own numbers over the whole run, in a few words."""
    if job == "hf":
        res = result_line(run["job"].text())
        return (f"{res.get('samples_per_s')} samples/s after its warm-up, {res.get('steps')} steps, n_gpu "
                f"{res.get('n_gpu')}, {res.get('wrapped')}" if res else f"no RESULT: {run['job'].tail()}")
    if job == "imagenet":
        pts = imagenet_points(run)
        return (f"{len(pts)} progress lines, last batch {pts[-1][1]}, mean batch time {pts[-1][2]:.3f} s" if pts
                else f"no progress lines: {run['job'].tail()}")
    rate, note = ddp_rate(run)
    return f"{rate:.2f} steps/s; {note}" if rate else f"{note}: {run['job'].tail()}"


def part_a(job):
    if job in ("hf",) and not HAVE.get("transformers"):
        say(f"{job:9} skipped: transformers does not import here")
        return
    if job == "imagenet" and (not HAVE.get("torchvision") or not os.path.exists(IMAGENET)):
        say(f"{job:9} skipped: {'torchvision does not import' if not HAVE.get('torchvision') else IMAGENET + ' missing'}")
        return
    runs = {}
    for arm in ("plain", "inject"):
        try:
            runs[arm] = run_a(job, arm)
        except Exception as e:  # (a row saying so, never the end of the script)
            say(f"{job:9} {arm:7} failed in the script: {type(e).__name__}: {e}")
            return
        r = runs[arm]
        if arm == "plain":
            say(f"{job:9} {'plain':7} {exit_cell(r):>8}  {'-':>14}  {'-':14} {'-':>9} {'-':9} {'-':>5}  "
                f"(its own: {own_summary(job, r)})")
            continue
        rc, took, err = r.get("inject", ("-", 0.0, []))
        loaded = ",".join(re.findall(r"in ([\d.]+) s", " ".join(err))) or "-"
        code, steps, source, nranks, headline = verdict_cells(r)
        p, i, unit, note = rate_pair(job, runs["plain"], r)
        ratio = f"{i / p:.3f}" if p and i else "n/a"
        say(f"{job:9} {'inject':7} {exit_cell(r):>8}  {f'{rc} {took:.1f}s':>8} {loaded:>5}  {str(code):14} "
            f"{str(steps):>9} {str(source):9} {str(nranks):>5}  {unit} plain {fmt(p, unit)} injected {fmt(i, unit)} "
            f"ratio {ratio}")
        say(f"{'':9}   headline: {headline[:150]}")
        say(f"{'':9}   window: {note}")
        if rc != 0 and err:
            say(f"{'':9}   inject said: {' | '.join(err)[-250:]}")
        if job == "imagenet":
            say(f"{'':9}   (imagenet cut with SIGINT after {SECONDS_A + 15:.0f} s, both runs: expected; its epoch is 5005 batches)")


# Part B's arms beside the plain run (ARMS, space-separated): what each turns on or off under `tuimon run`
# (issue 43: where a DataParallel job's few percent go). hz0: the line sampler never started; noprobe: the
# launcher's environment without the probe (--headless runs no monitor); off-*: hf_trainer.py --tuimon-off
# (the probe loaded, parts of it turned off at the training's start). PAIRS even: each arm as often early as late.
ARM_SETTINGS = {"tuimon": ({}, []), "hz0": ({"TUIMON_SAMPLE_HZ": "0"}, []), "noprobe": ({"TUIMON_PROBE": "0"}, []),
                "off-dp": ({}, ["--tuimon-off", "dp"]), "off-syncs": ({}, ["--tuimon-off", "syncs"]),
                "off-sampler": ({}, ["--tuimon-off", "sampler"]), "off-gpu": ({}, ["--tuimon-off", "gpu"]),
                "off-all": ({}, ["--tuimon-off", "all"])}
ARMS = list(dict.fromkeys(os.environ.get("ARMS", "tuimon").split()))  # (each arm once)


def part_b():
    if not HAVE.get("transformers"):
        say("trainer-run skipped: transformers does not import here")
        return
    unknown = [a for a in ARMS if a not in ARM_SETTINGS]
    if not ARMS:
        say("trainer-run: ARMS is empty")
        return
    if unknown:
        say(f"trainer-run: unknown ARMS {unknown}; known: {' '.join(ARM_SETTINGS)}")
        return
    say()
    say(f"B. HF Trainer plainly vs under `tuimon run --headless` ({' '.join(ARMS)}): {PAIRS} rounds, the arms "
        f"in turn (reversed every other round), {SECONDS:.0f} s a run; the callback's samples/s after its warm-up")
    say("round arm          exit  steps  n_gpu wrapped         samples/s  step ms  probe off (then each round's ratios)")
    ratios = {arm: [] for arm in ARMS}
    for k in range(1, PAIRS + 1):
        got = {}
        order = ["plain", *ARMS]
        for arm in (order if k % 2 else order[::-1]):
            name = f"trainer-run-{k}-{arm}"
            cmd = hf_cmd(name, SECONDS)
            env = None
            if arm != "plain":
                extra_env, extra_args = ARM_SETTINGS[arm]
                cmd = [PY, "-m", "tuimon", "run", "--headless", "--", *cmd, *extra_args]
                env = {**os.environ, **extra_env} if extra_env else None
            try:
                j = Job(name, cmd, env=env)
                code = j.finish(SECONDS + 240)
            except Exception as e:
                say(f"{k:>5} {arm:11}  failed in the script: {type(e).__name__}: {e}")
                continue
            got[arm] = result_line(j.text())
            res = got[arm]
            sps, ms = res.get("samples_per_s"), res.get("step_ms")
            say(f"{k:>5} {arm:11}  {('killed:' if j.killed else '') + str(code):>4}  "
                f"{res.get('steps', '-'):>5}  {res.get('n_gpu', '-'):>5} {str(res.get('wrapped', '-')):15} "
                f"{(f'{sps:.1f}' if sps else 'n/a'):>9}  {(f'{ms:.2f}' if ms else 'n/a'):>7}  "
                f"{res.get('tuimon_off') or ''}" + ("" if res else f"  (no RESULT: {j.tail()})"))
        base = got.get("plain", {}).get("samples_per_s")
        line = []
        for arm in ARMS:
            sps = got.get(arm, {}).get("samples_per_s")
            if base and sps:
                ratios[arm].append(sps / base)
                line.append(f"{arm} {sps / base:.4f}")
        say(f"{k:>5} / plain: {', '.join(line) or 'n/a'}")
    for arm in ARMS:
        if ratios[arm]:
            mean = sum(ratios[arm]) / len(ratios[arm])
            say(f"{arm}: samples/s / plain, per round: {', '.join(f'{x:.4f}' for x in ratios[arm])}; mean {mean:.4f}"
                + (f" (done when >= 0.99: {'yes' if mean >= 0.99 else 'NO'})" if arm == "tuimon" else ""))


say(f"Real jobs: {' '.join(jobs)}; device {DEVICE}; part A {SECONDS_A:.0f} s a run, inject {INJECT_AT:.0f} s in, "
    f"attach {ATTACH_AFTER:.0f} s after it; one pair (plain, then injected) a job")
HAVE = {}
for line in versions():
    say("  " + line)
    w = line.split()
    if len(w) >= 2 and w[0] in ("transformers", "torchvision") and w[1] != "MISSING":
        HAVE[w[0]] = True
a_jobs = [j for j in jobs if j in ("hf", "imagenet", "ddp")]
if a_jobs:
    say()
    say("A. tuimon inject into a running job, then attach --once --json (one pair a job: plain, then injected)")
    say(f"{'job':9} {'arm':7} {'exit':>8}  {'inject rc,s':>8} {'load':>5}  {'verdict':14} {'steps':>9} {'source':9} "
        f"{'ranks':>5}  throughput after the inject (the job's own timer)")
for job in a_jobs:
    try:
        part_a(job)
    except Exception as e:
        say(f"{job:9} failed in the script: {type(e).__name__}: {e}")
if "trainer-run" in jobs:
    try:
        part_b()
    except Exception as e:
        say(f"trainer-run failed in the script: {type(e).__name__}: {e}")
say()
say(f"total {time.monotonic() - started:.0f} s")
PY
