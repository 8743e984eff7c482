"""The screen's path for nsys windows, with the real nsys: LiveSession (what the TUI polls every
second) on a job under `tuimon run --headless --nsys`; `c` is request_capture; the capture panel
reads cycle.capture and its summary. Two windows, then one asked for while the first is written.
On the GPU machine: source .gpu/activate.sh; python3 tests/gpu/check_nsys_screen_path.py [JOB...]
(default job: tests/workloads/regressing.py on CUDA; the demo has NVTX ranges of its own)"""

import subprocess
import sys
import time

from tuimon.capture.client import CaptureRefused
from tuimon.monitor.session import LiveSession

cmd = sys.argv[1:] or [sys.executable, "tests/workloads/regressing.py", "--device", "cuda", "--seconds", "90"]
job = subprocess.Popen([sys.executable, "-m", "tuimon", "run", "--headless", "--nsys", "--", *cmd],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
session = LiveSession(job.pid, 1.0)
try:
    end = time.monotonic() + 60
    while time.monotonic() < end:
        c = session.poll()
        if c.training is not None and c.training.steps > 200:
            break
        time.sleep(1)
    print(f"steps {c.training.steps}, capture kind {c.training.capture_kind}, problems {c.problems}")
    for n in (1, 2):
        print(session.request_capture(10, None))
        refused = None
        seen = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120:
            c = session.poll()
            st = c.capture
            if st and (not seen or seen[-1] != st.state):
                seen.append(st.state)
            if st and st.state == "writing" and refused is None:
                try:
                    session.request_capture(10, None)
                    refused = "NOT refused"
                except CaptureRefused as e:
                    refused = str(e)
            if st and st.state == "done" and st.summary and st.summary.state in ("done", "failed"):
                break
            time.sleep(0.5)
        print(f"window {n}: states {seen} in {time.monotonic() - t0:.1f} s; path {st.path}; "
              f"steps {st.first_step}..{st.last_step}; message {st.message!r}")
        print(f"  asked again while writing: {refused}")
        print(f"  summary {st.summary.state} {st.summary.size} B; error {st.summary.error}")
        for line in st.summary.lines[:14]:
            print("   ", line[:120])
finally:
    session.stop()
    job.terminate()
    job.wait()
