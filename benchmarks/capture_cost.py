"""What a capture window costs the training step: mean step time before, inside and after a
window (the export runs during "after"), and the stop() stall and export time the probe measured.

    python benchmarks/capture_cost.py [--steps 20] [-- training command...]

Default job: the bundled demo workload with no input delay (GPU when there is one). Under
`tuimon run --nsys` the window is an nsys session's start/stop, run from here; otherwise
torch.profiler through the probe.
"""

import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tuimon.capture import nsys_session  # noqa: E402
from tuimon.capture.client import CaptureClient  # noqa: E402
from tuimon.channel import layout as L  # noqa: E402
from tuimon.monitor.target import open_channel  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--nsys", action="store_true")
    ap.add_argument("command", nargs="*")
    a = ap.parse_args()
    job_cmd = a.command or [sys.executable, "-m", "tuimon.workloads.demo_train", "--delay", "0", "--seconds", "90"]
    run = [sys.executable, "-m", "tuimon", "run", "--headless"] + (["--nsys"] if a.nsys else []) + ["--", *job_cmd]
    job = subprocess.Popen(run, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        reader = None
        for _ in range(300):
            try:
                reader, _ = open_channel(job.pid)
                break
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.1)
        assert reader is not None, "no channel"
        steps: dict[int, float] = {}

        def drain():
            for r in reader.drain().records:
                if r[0] == L.STEP:
                    steps[r[5]] = (r[7] - r[6]) / 1e6

        while reader.steps < 60:
            drain()
            time.sleep(0.2)
        client = nsys_session.for_job(reader.info, lambda: reader.steps) or \
            CaptureClient(reader.path, reader.info.pid, reader.info.start_ticks)
        st = client.wait(client.request(steps=a.steps), 300)
        time.sleep(3)  # the export runs during these steps
        drain()
        first, last = st.first_step, st.last_step

        def mean(lo, hi):
            v = [steps[k] for k in range(lo, hi + 1) if k in steps]
            return sum(v) / len(v) if v else float("nan")

        before = mean(first - 40, first - 1)
        rows = [("before the window (40 steps)", before), (f"inside the window ({a.steps} steps)", mean(first, last)),
                ("the step that stops the window", steps.get(last + 1, float("nan"))),
                ("after (export running, 30 steps)", mean(last + 2, last + 31))]
        print(f"capture {st.state}: {st.message}")
        print(f"{'steps':<36}{'mean ms':>10}{'x before':>10}")
        for name, v in rows:
            print(f"{name:<36}{v:>10.3f}{v / before:>10.3f}")
    finally:
        job.terminate()
        job.wait()


if __name__ == "__main__":
    main()
