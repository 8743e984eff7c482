"""A writer process for channel tests: emits self-describing records (every field derives from
the record's number i, so a torn or mixed-up record is detectable) and reports progress.

usage: writer_proc.py COUNT RATE_PER_S RING_RECORDS   (COUNT 0: forever; RATE 0: flat out)
"""

import sys
import time

from tuimon.channel import SegmentWriter
from tuimon.channel import layout as L
from tuimon.channel.meta import JobMeta


def fields(i: int):
    return (L.RANGE, i % 5, 1 + i % 3, i & 0xFFFFFFFF, i & 0xFFFFFFFF, i, 3 * i, float(i))


def main():
    count, rate, ring = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    w = SegmentWriter.create(JobMeta(argv=("test-writer",)), ring)
    for n in ("a", "b", "c"):
        w.intern(n)
    print("ready", flush=True)
    i, t_start = 0, time.monotonic()
    while count == 0 or i < count:
        kind, depth, nid, tid, step, t0, t1, value = fields(i)
        w.emit(kind, depth, nid, tid, step, t0, t1, value)
        i += 1
        if rate and i % 100 == 0:
            ahead = i / rate - (time.monotonic() - t_start)
            if ahead > 0:
                time.sleep(ahead)
    print("done", i, flush=True)
    sys.stdin.read()  # stay alive until told to go (the test closes stdin)


if __name__ == "__main__":
    main()
