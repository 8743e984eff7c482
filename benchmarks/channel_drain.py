"""Reader drain rate and loss: a writer process emits ranges through the real probe at a fixed
rate (default 200k/s) while this process drains the default-size ring at 10 Hz.

    python benchmarks/channel_drain.py [--rate 200000] [--seconds 5] [--hz 10]

Prints records written, read and lost, and the drain rate (records per second of time spent
inside drain()). Goals (issue 2): drain >= 2M records/s, no loss.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

WRITER = """
import sys, time, tuimon
rate, seconds = float(sys.argv[1]), float(sys.argv[2])
tuimon.instrument(nvtx_forward=False)
print("ready", flush=True)
sys.stdin.readline()
r = tuimon.range
t0 = time.monotonic(); i = 0
while True:
    for _ in range(200):
        with r("bench"):
            pass
    i += 200
    now = time.monotonic() - t0
    if now >= seconds:
        break
    ahead = i / rate - now
    if ahead > 0:
        time.sleep(ahead)
print("wrote", i, round(i / (time.monotonic() - t0)), flush=True)
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=200_000)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--hz", type=float, default=10)
    a = ap.parse_args()
    os.environ.setdefault("TUIMON_SHM_DIR", tempfile.mkdtemp())
    env = dict(os.environ, PYTHONPATH=ROOT)
    from tuimon.channel import SegmentReader, segment_path
    from tuimon.channel import layout as L

    w = subprocess.Popen([sys.executable, "-c", WRITER, str(a.rate), str(a.seconds)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=env)
    assert w.stdout.readline().strip() == "ready"
    r = SegmentReader(segment_path(w.pid))
    w.stdin.write("go\n")
    w.stdin.flush()
    read = lost = 0
    busy = 0.0
    drains = 0
    while True:
        t = time.perf_counter()
        b = r.drain()
        busy += time.perf_counter() - t
        drains += 1
        read += len(b.records)
        lost += b.lost + b.corrupt
        if w.poll() is not None and r.tail == r.head:
            break
        time.sleep(1 / a.hz)
    out = w.stdout.read().split()
    written, achieved = int(out[1]), int(out[2])
    from tuimon.channel import ring

    print(f"ring {L.DEFAULT_RING_RECORDS} records, drains at {a.hz:g} Hz for {a.seconds:g} s, "
          f"hot path {ring.IMPLEMENTATION}")
    print(f"{'writer rate (ranges/s)':<28}{achieved:>14,}")
    print(f"{'records written':<28}{written:>14,}")
    print(f"{'records read':<28}{read:>14,}")
    print(f"{'records lost':<28}{lost:>14,}")
    print(f"{'drain rate (records/s)':<28}{read / busy:>14,.0f}   ({drains} drains, {busy * 1e3:.1f} ms inside drain)")
    r.close()
    os.unlink(segment_path(w.pid))


if __name__ == "__main__":
    main()
