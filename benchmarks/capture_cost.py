"""What a capture window costs the job, judged from the job's own step times (the channel's STEP
records, every step), window by window: the worst step from the window's first to just past the
end of its work (its trace written) against the worst normal step before it (the budget: 1.2x),
and the time the job lost (what those steps took beyond its typical step).

    python benchmarks/capture_cost.py [--job small-ops|demo] [--steps 10] [--windows 3]
        [--before REV] [--nsys] [-- training command...]

--before REV: the same job and windows first under this tree with the capture windows' code as it
was at REV (probe/capture.py from git, or from a folder holding its tuimon/; the channel's layout
may have changed since, so only the window code is swapped), then under this tree: before and
after, side by side in one run.
Jobs: small-ops (tests/workloads/small_ops.py: ~1,500 small operators a step on the CPU, the kind
of loop a window costs most) or demo (the bundled workload, no input delay; on the GPU when there
is one). Under `--nsys` the window is an nsys session's start/stop, run from here.
"""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tuimon.capture import nsys_session  # noqa: E402
from tuimon.capture.client import CaptureClient  # noqa: E402
from tuimon.capture.cost import NORMAL_STEPS, StepLog, window_cost  # noqa: E402
from tuimon.monitor.target import open_channel  # noqa: E402

JOBS = {
    "small-ops": [sys.executable, os.path.join(ROOT, "tests", "workloads", "small_ops.py"), "--seconds", "600"],
    "demo": [sys.executable, "-m", "tuimon.workloads.demo_train", "--delay", "0", "--seconds", "600"],
}


def tree_at(rev: str) -> str:
    """tuimon as it was at rev: a folder holding its tuimon/ (a machine without git: made elsewhere
    with `git archive REV tuimon | tar -x -C DIR`), or a git revision (extracted to a temporary
    folder); with this tree's built C extensions where the C sources are the same."""
    if os.path.isdir(os.path.join(rev, "tuimon")):
        d = tempfile.mkdtemp(prefix="tuimon-before-")
        shutil.copytree(os.path.join(rev, "tuimon"), os.path.join(d, "tuimon"))
    else:
        d = tempfile.mkdtemp(prefix="tuimon-before-")
        archive = subprocess.run(["git", "-C", ROOT, "archive", rev, "tuimon"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", d], input=archive, check=True)
    sources = sorted(glob.glob(os.path.join(ROOT, "tuimon", "channel", "*.[ch]")))
    if all(_same(f, os.path.join(d, os.path.relpath(f, ROOT))) for f in sources):
        for so in glob.glob(os.path.join(ROOT, "tuimon", "channel", "*.so")):
            shutil.copy(so, os.path.join(d, "tuimon", "channel"))
    return d


CAPTURE_PY = os.path.join("tuimon", "probe", "capture.py")


def capture_code_at(rev: str) -> str:
    """This tree with the capture windows' code (probe/capture.py up to its control thread) as it
    was at rev (a folder or a revision, as tree_at): what a window does is what is compared, read by
    this tree's monitor (a channel of another layout is not readable by it)."""
    old = tree_at(rev)
    d = tempfile.mkdtemp(prefix="tuimon-capture-before-")
    shutil.copytree(os.path.join(ROOT, "tuimon"), os.path.join(d, "tuimon"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(os.path.join(old, CAPTURE_PY)) as f:
        windows = f.read().split("\ndef control_thread(", 1)[0].split("\nMEMORY_EVERY_S", 1)[0]
    with open(os.path.join(ROOT, CAPTURE_PY)) as f:
        control = "\nMEMORY_EVERY_S" + f.read().split("\nMEMORY_EVERY_S", 1)[1]
    if "def at_exit" not in windows:  # (the probe's exit hook asks for it)
        control += "\n\nif not hasattr(Capturer, 'at_exit'):\n    Capturer.at_exit = lambda self: None\n"
    with open(os.path.join(d, CAPTURE_PY), "w") as f:
        f.write(windows + "\n" + control)
    shutil.rmtree(old, ignore_errors=True)
    return d


def _same(a: str, b: str) -> bool:
    try:
        with open(a, "rb") as x, open(b, "rb") as y:
            return x.read() == y.read()
    except OSError:
        return False


def measure(root: str, job_cmd: list[str], steps: int, windows: int, nsys: bool) -> list[dict]:
    # (root first; the rest kept: on the GPU machine the packages come through PYTHONPATH)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    run = [sys.executable, "-m", "tuimon", "run", "--headless"] + (["--nsys"] if nsys else []) + ["--", *job_cmd]
    job = subprocess.Popen(run, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    stop = threading.Event()
    try:
        reader = None
        for _ in range(600):
            try:
                reader, _ = open_channel(job.pid)
                break
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.1)
        assert reader is not None, "no channel"
        log = StepLog()
        lock = threading.Lock()

        def drain():  # every step, as the monitor sees them
            while not stop.wait(0.05):
                batch = reader.drain()
                with lock:
                    log.add(batch.records)

        threading.Thread(target=drain, daemon=True).start()
        client = nsys_session.for_job(reader.info, lambda: reader.steps) or \
            CaptureClient(reader.path, reader.info.pid, reader.info.start_ticks)
        while reader.steps < 3 * NORMAL_STEPS + 20:  # (past the warm-up: a long window judges more steps than 50)
            time.sleep(0.2)
        time.sleep(2.0)
        most_steps = NORMAL_STEPS  # the most steps a window judged yet (the next one's normal steps reach as far)
        for w in range(windows):
            st = client.wait(client.request(steps=steps), 300)
            end = time.monotonic() + 60
            cost = None
            while cost is None and time.monotonic() < end:
                time.sleep(0.2)
                with lock:
                    cost = window_cost(list(log.steps), st.first_step, st.last_step, st.updated_ns)
            rows.append({"window": w + 1, "state": st.state, "message": st.message, "cost": cost})
            if cost is not None:  # the next window's normal steps start after this one's
                most_steps = max(most_steps, cost.steps)
                time.sleep(max(2.0, most_steps * cost.typical_ms / 1e3 * 1.5))  # (the next judged on clean steps)
        return rows
    finally:
        stop.set()
        job.terminate()
        job.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", choices=sorted(JOBS), default="small-ops")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--before", metavar="REV", help="also measure tuimon as it was at this git revision (or in "
                                                  "this folder, holding its tuimon/), first")
    ap.add_argument("--nsys", action="store_true")
    ap.add_argument("command", nargs="*")
    a = ap.parse_args()
    job_cmd = a.command or JOBS[a.job]
    trees = ([(f"before ({a.before})", capture_code_at(a.before))] if a.before else []) + [("this tree", ROOT)]
    print(f"job: {' '.join(job_cmd[1:])}; {a.windows} windows of {a.steps} steps each")
    print(f"{'tuimon':<22}{'window':>7}{'worst normal':>14}{'worst':>10}{'ratio':>8}{'over':>6}{'lost':>10}  probe says")
    for name, root in trees:
        for r in measure(root, job_cmd, a.steps, a.windows, a.nsys):
            c = r["cost"]
            if c is None:
                print(f"{name:<22}{r['window']:>7}  {r['state']}: {r['message'][:120]} (no cost: steps missing)")
                continue
            print(f"{name:<22}{r['window']:>7}{c.worst_normal_ms:>11.1f} ms{c.worst_ms:>7.1f} ms{c.ratio:>7.2f}x"
                  f"{c.over:>6}{c.lost_ms:>7.0f} ms  {r['message'][:150]}")
        if root != ROOT:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
