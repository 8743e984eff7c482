"""What a memory window's snapshot costs after torch has taken it (the part that runs on the CPU
and so can be measured without a GPU): pickling it on the probe's thread (holds the GIL: the loop
waits), freeing it, the file's size, and the monitor's summary of it in a child process. The
snapshot is built in torch's documented format with torch's sharing: each allocation's frames
are a list of references to frame dicts shared by every event made from the same line (torch's
_snapshot symbolizes each unique frame once), so the pickle keeps each frame once.

    python benchmarks/memory_snapshot_cost.py [--events 100000] [--frames 30] [--lines 200]

torch's own part (_record_memory_history per allocation, _snapshot) needs CUDA:
tests/gpu/check_memory.py's bench and capture cases measure it.
"""

import argparse
import os
import pickle
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def snapshot(events: int, depth: int, lines: int) -> dict:
    rng = random.Random(0)
    frame = [{"filename": f"/home/u/model_{k % 7}.py", "line": 10 + k, "name": f"forward_{k}"} for k in range(lines)]
    torch_frames = [{"filename": "/usr/lib/python3.12/site-packages/torch/nn/modules/module.py", "line": 1700 + k,
                     "name": "_call_impl"} for k in range(depth)]
    stacks = [[frame[k]] + torch_frames[: depth - 1] for k in range(lines)]
    trace, live, addr = [], [], 1 << 40
    for i in range(events):
        if live and (len(live) > 400 or rng.random() < 0.5):
            a, size = live.pop(rng.randrange(len(live)))
            for action in ("free_requested", "free_completed"):
                trace.append({"action": action, "addr": a, "size": size, "stream": 0, "frames": [], "time_us": i})
        else:
            size = rng.choice((512, 4096, 1 << 20, 8 << 20, 64 << 20))
            addr += size
            live.append((addr, size))
            trace.append({"action": "alloc", "addr": addr, "size": size, "stream": 0,
                          "frames": stacks[rng.randrange(lines)], "time_us": i})
    blocks = [{"address": a, "size": s, "requested_size": s, "state": "active_allocated", "frames": []} for a, s in live]
    segments = [{"device": 0, "address": b["address"], "total_size": b["size"], "stream": 0, "segment_type": "large",
                 "segment_pool_id": (0, 0), "allocated_size": b["size"], "active_size": b["size"],
                 "requested_size": b["size"], "blocks": [b]} for b in blocks]
    return {"segments": segments, "device_traces": [trace[:events]]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--frames", type=int, default=30, help="Python frames per allocation's stack")
    ap.add_argument("--lines", type=int, default=200, help="distinct lines that allocate")
    a = ap.parse_args()
    snap = snapshot(a.events, a.frames, a.lines)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "snapshot.pickle")
        t = time.perf_counter()
        with open(path, "wb") as f:
            pickle.dump(snap, f, protocol=pickle.HIGHEST_PROTOCOL)
        write_ms = (time.perf_counter() - t) * 1e3
        t = time.perf_counter()
        del snap
        free_ms = (time.perf_counter() - t) * 1e3
        size = os.path.getsize(path)
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "tuimon.capture.memory_summary", path], capture_output=True, text=True)
        summary_s = time.perf_counter() - t
        assert p.returncode == 0, p.stderr
    print(f"| events | frames each | pickle written (GIL held) | freed | file | summary (child process) |\n"
          f"| --- | --- | --- | --- | --- | --- |\n"
          f"| {a.events:,} | {a.frames} | {write_ms:,.0f} ms | {free_ms:,.0f} ms | {size / 2**20:.1f} MiB | "
          f"{summary_s:.2f} s |")


if __name__ == "__main__":
    main()
