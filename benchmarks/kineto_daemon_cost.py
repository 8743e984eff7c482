"""What Kineto's daemon mode costs a job's step with no window taken (issue 41; launch.py keeps it off
unless TUIMON_KINETO=1 until this is within the probe's 1% budget): the same job under `tuimon run
--headless` with TUIMON_KINETO=1 (KINETO_USE_DAEMON=1: Kineto polls the endpoint every 5 s and counts
optimizer steps through torch's step hook; on a GPU, CUPTI's callbacks too) and with TUIMON_KINETO=0,
in alternating runs (on-off-off-on, --pairs pairs), this script the host's endpoint, as tuimon is when it
runs. Each run's throughput: the probe's step count (the channel's header) over --seconds, after --warmup
seconds past its first step. The table: each run's steps/s, each pair's ratio on/off, their median
(budget: >= 0.99).

    python benchmarks/kineto_daemon_cost.py [--pairs 3] [--seconds 20] [--warmup 5] [-- training command...]

The job: tests/workloads/small_ops.py (~1,500 small operators a step on the CPU) unless a command is given
(it must run for --warmup + --seconds + ~10 s and step an optimizer)."""

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from kineto_cost import channel_of  # noqa: E402

from tuimon.capture.kineto_daemon import EndpointTaken, KinetoEndpoint  # noqa: E402

JOB = [sys.executable, os.path.join(ROOT, "tests", "workloads", "small_ops.py"), "--seconds", "600"]


def one_run(cmd: list[str], daemon: bool, seconds: float, warmup: float, endpoint) -> tuple[float, bool]:
    """steps/s of one run; whether it asked the endpoint."""
    env = dict(os.environ, TUIMON_KINETO="1" if daemon else "0", KINETO_LOG_LEVEL="6",
               PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    env.pop("KINETO_USE_DAEMON", None)
    job = subprocess.Popen([sys.executable, "-m", "tuimon", "run", "--headless", "--", *cmd], cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        reader = channel_of(job.pid, 120)
        while reader.steps == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reader.steps > 0, "the job took no step in 120 s"
        time.sleep(warmup)
        n0, t0 = reader.steps, time.monotonic()
        time.sleep(seconds)
        n1, t1 = reader.steps, time.monotonic()
        assert n1 > n0, f"the job took no step in {seconds:g} s"
        asked = endpoint is not None and endpoint.registered(reader.info.pid)
        return (n1 - n0) / (t1 - t0), asked
    finally:
        job.terminate()
        job.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("command", nargs="*")
    a = ap.parse_args()
    cmd = a.command or JOB
    try:
        endpoint = KinetoEndpoint()
    except EndpointTaken as e:  # (a real dynolog answers the jobs: it is their endpoint then)
        endpoint = None
        print(f"the host's endpoint is not ours: {e}")
    print(f"job: {' '.join(cmd[1:])}; {a.pairs} pairs, {a.seconds:g} s a run after {a.warmup:g} s")
    print(f"{'pair':>4}  {'daemon on':>14}  {'daemon off':>14}  {'on/off':>7}")
    ratios = []
    try:
        for k in range(1, a.pairs + 1):
            got = {}
            for daemon in ((True, False) if k % 2 else (False, True)):
                got[daemon] = one_run(cmd, daemon, a.seconds, a.warmup, endpoint)
            (on, asked), (off, _) = got[True], got[False]
            ratios.append(on / off)
            print(f"{k:>4}  {on:>8.1f} steps/s  {off:>8.1f} steps/s  {on / off:>7.4f}"
                  + ("" if asked or endpoint is None else "  (the daemon-mode run never asked the endpoint)"), flush=True)
    finally:
        if endpoint is not None:
            endpoint.close()
    med = statistics.median(ratios)
    print(f"median on/off {med:.4f} (budget >= 0.99: {'yes' if med >= 0.99 else 'NO'}); "
          f"range {min(ratios):.4f}..{max(ratios):.4f}")


if __name__ == "__main__":
    main()
