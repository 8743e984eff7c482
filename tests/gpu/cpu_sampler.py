"""Who uses the CPU, every 0.25 s, as JSON lines: every process's CPU share since the last sample
(with its parent, nice and name) and the threads of one process (by PID or by a pattern in its
command line). For the GPU scripts that ask what an nsys window costs and where.

    python3 cpu_sampler.py OUT.jsonl --job-pattern regressing.py [--seconds 200]
"""

import argparse
import json
import os
import time

TICK = os.sysconf("SC_CLK_TCK")


def stat(path):
    """(name, ppid, nice, cpu ticks) from a /proc stat file, or None if it went away."""
    try:
        raw = open(path, "rb").read().decode(errors="replace")
    except OSError:
        return None
    name = raw[raw.index("(") + 1:raw.rindex(")")]
    f = raw[raw.rindex(")") + 2:].split()
    return name, int(f[1]), int(f[16]), int(f[11]) + int(f[12])


def busy(folder, ids, prev, cur, dt):
    """(id, stat, share of a core) of the tasks under folder that used > 2% of a core since the
    last sample (prev: their CPU ticks then; cur gets them now)."""
    for i in ids:
        s = stat(f"{folder}/{i}/stat")
        if s is not None:
            cur[(folder, i)] = s[3]
            share = (s[3] - prev.get((folder, i), s[3])) / TICK / dt
            if share > 0.02:
                yield int(i), s, round(share, 3)


def find(pattern):
    """The job: the first-started python process running the pattern (its DataLoader workers come
    later, with the same command line), not tuimon's."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if pattern in cmd and os.path.basename(cmd.split(" ")[0]).startswith("python") and " -m tuimon" not in cmd:
                found.append(int(pid))
    return min(found, default=None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--job-pattern", required=True)
    ap.add_argument("--seconds", type=float, default=200)
    a = ap.parse_args()
    prev, prev_t, job = {}, time.monotonic(), None
    end = prev_t + a.seconds
    with open(a.out, "w", buffering=1) as out:
        while time.monotonic() < end:
            time.sleep(0.25)
            now = time.monotonic()
            dt = now - prev_t
            job = job if job and os.path.exists(f"/proc/{job}") else find(a.job_pattern)
            cur = {}
            rows = [[i, s[1], s[0], s[2], share]
                    for i, s, share in busy("/proc", filter(str.isdigit, os.listdir("/proc")), prev, cur, dt)]
            tasks = f"/proc/{job}/task"
            ids = os.listdir(tasks) if job and os.path.exists(tasks) else []
            threads = [[i, s[0], s[2], share] for i, s, share in busy(tasks, ids, prev, cur, dt)]
            rows.sort(key=lambda r: -r[4])
            threads.sort(key=lambda r: -r[3])
            out.write(json.dumps({"t": round(now, 3), "job": job, "procs": rows[:10], "job_threads": threads[:8]}) + "\n")
            prev, prev_t = cur, now


if __name__ == "__main__":
    main()
