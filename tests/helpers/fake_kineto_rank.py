"""One rank of a fake torchrun job for the Kineto-window tests: its channel (a segment with its rank,
steps as its optimizer would count them, the probe's "now") and Kineto's daemon client inside it,
written from Kineto's structs and its start rules (libkineto/src/Config.cpp,
AsyncActivityProfilerHandler.cpp, GenericActivityProfiler.cpp), asking the endpoint every 0.1 s
(Kineto: 5 s). The ranks step in lockstep as DDP's do: step k of every rank spans
[ORIGIN + (k-1) STEP_MS, ORIGIN + k STEP_MS] of CLOCK_MONOTONIC (ORIGIN in ns, the same for all).

Kineto's start rules, as imitated:
- A config with PROFILE_START_ITERATION >= 0 and ACTIVITIES_ITERATIONS > 0 (or
  PROFILE_START_ITERATION_ROUNDUP > 0, which sets the start iteration to 0) is one of iterations,
  and takes precedence: its count is steps - 1; it waits for PROFILE_START_ITERATION, or, when the
  count is already past it at its next step, rounds that count up to the round-up.
- Any other is one of time: PROFILE_START_TIME (Unix ms; 0: the config's arrival +
  ACTIVITIES_WARMUP_PERIOD_SECS (5 by default) + 2 ticks; more than 10 s past: refused at parse).
  The profiler thread, started at the config's arrival, ticks every TICK_S (Kineto: 1 s) and at
  the first tick with now + TICK_S >= start - warm-up either refuses the config (start past, or
  less than the warm-up left) or sleeps until the start and traces until start +
  ACTIVITIES_DURATION_MSECS (500 by default).

Once a window has run (and, for one of time, a step has ended past its end), the rank writes the
fixture trace where the config says and reports in OUT/rank<R>.json what it was handed and what it
traced: `traced` (the first and last steps begun in the window, by its own clocks; None: none), or
`refused` (why Kineto would not run it).

ASK: 1 asks every 0.1 s; 0 never; once: one request that reaches the endpoint (registered), then silence.

usage: fake_kineto_rank.py ENDPOINT RANK WORLD STEP_MS ASK(0|1|once) SOURCE OUT ORIGIN_NS
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import struct
import sys
import threading
import time
import uuid

from tuimon.capture import kineto_daemon as K
from tuimon.channel import SegmentWriter
from tuimon.channel import layout as L
from tuimon.channel.control import Now, open_control
from tuimon.channel.meta import JobMeta

TRACE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "kineto_gpu_trace.json")
TICK_S = 0.1  # Kineto's profiler thread: 1 s (scaled as the poll is)
MAX_REQUEST_AGE_S = 10.0


def key(config: str, k: str, default: str | None = None) -> str:
    found = re.search(rf"^{k}=(.*)$", config, re.M)
    if found is None:
        assert default is not None, (k, config)
        return default
    return found.group(1)


def by_iterations(config: str) -> bool:
    """Kineto's hasProfileStartIteration, after Config::validate's round-up rule."""
    start = int(key(config, "PROFILE_START_ITERATION", "-1"))
    if int(key(config, "PROFILE_START_ITERATION_ROUNDUP", "-1")) > 0 and start < 0:
        start = 0
    return start >= 0 and int(key(config, "ACTIVITIES_ITERATIONS", "0")) > 0


def main() -> None:
    endpoint, rank, world, step_ms, ask, source, out, origin = sys.argv[1:9]
    r, step_ns, origin_ns = int(rank), round(float(step_ms) * 1e6), int(origin)
    w = SegmentWriter.create(JobMeta(argv=("train.py", "--rank", rank), rank=r, local_rank=r, world_size=int(world)),
                             4096)
    ctl, _view = open_control(w.path)
    signal.signal(signal.SIGTERM, lambda *_: (w.unlink(), os._exit(0)))  # (the test ends it: no segment left)
    w.emit(L.GAUGE, 0, w.intern("step.source"), 1, 1, time.monotonic_ns(), time.monotonic_ns(),
           float(L.STEP_SOURCES.index(source)))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(K.abstract_address("dynoconfigclient" + str(uuid.uuid4())))
    sock.settimeout(0.2)
    lock = threading.Lock()
    state: dict = {"steps": 0, "config": None, "records": []}  # records: (index, t0, t1) of every step
    report: dict = {"rank": r, "pid": os.getpid()}

    def write(path_asked: str) -> None:
        path = K.trace_file(path_asked, os.getpid())
        shutil.copy(TRACE, path + ".tmp")
        os.rename(path + ".tmp", path)  # (as Kineto: written, then renamed)
        report["trace"] = path
        done()

    def done() -> None:
        with open(os.path.join(out, f"rank{r}.json.tmp"), "w") as f:
            json.dump(report, f)
        os.rename(os.path.join(out, f"rank{r}.json.tmp"), os.path.join(out, f"rank{r}.json"))

    def timed(config: str, arrived_ms: int) -> None:  # Kineto's profiler thread, for a window of time
        warmup_s = int(key(config, "ACTIVITIES_WARMUP_PERIOD_SECS", "5"))
        start_ms = int(key(config, "PROFILE_START_TIME", "0"))
        if start_ms == 0:
            start_ms = arrived_ms + warmup_s * 1000 + round(2 * TICK_S * 1000)
        elif arrived_ms - start_ms > MAX_REQUEST_AGE_S * 1000:
            report["refused"] = "start time more than 10 s in the past"
            return done()
        start_s = start_ms / 1000
        while True:
            time.sleep(TICK_S)
            now = time.time()
            if now + TICK_S >= start_s - warmup_s:
                break
        if start_s < now:
            report["refused"] = "start timestamp is in the past"
            return done()
        if start_s - now < warmup_s:
            report["refused"] = "insufficient time for warmup"
            return done()
        wall, mono = time.time_ns(), time.monotonic_ns()  # (this rank's own reading of the two clocks)
        a = mono + start_ms * 1_000_000 - wall
        b = a + int(key(config, "ACTIVITIES_DURATION_MSECS", "500")) * 1_000_000
        while time.monotonic_ns() < b:
            time.sleep(max(0.0, (b - time.monotonic_ns()) / 1e9))
        while True:  # (its records past the window's end: every step begun in it is recorded)
            with lock:
                records = list(state["records"])
            if records and records[-1][2] >= b:
                break
            time.sleep(0.01)
        inside = [i for i, t0, _ in records if a <= t0 <= b]
        report.update(mode="time", traced=[min(inside), max(inside)] if inside else None)
        write(key(config, "ACTIVITIES_LOG_FILE"))

    def poll() -> None:  # Kineto's config thread
        sent = 0
        while ask == "1" or (ask == "once" and not sent):
            try:
                sock.sendto(K.encode("req", K.REQUEST.pack(3, 1, 0) + struct.pack("=i", os.getpid())),
                            K.abstract_address(endpoint))
                sent += 1
                got = K.decode(sock.recv(1 << 16))
            except OSError:  # (no endpoint yet, or no answer)
                got = None
            if got is not None and got[1]:
                config = got[1].decode()
                with lock:
                    report.update(config=config, steps_at_config=state["steps"])
                    if by_iterations(config):
                        state["config"] = config
                if not by_iterations(config):
                    threading.Thread(target=timed, args=(config, time.time_ns() // 1_000_000), daemon=True).start()
            time.sleep(0.1)

    threading.Thread(target=poll, daemon=True).start()
    print("ready", flush=True)
    active = None  # (start iteration, end iteration, log file)
    steps = (time.monotonic_ns() - origin_ns) // step_ns  # (the steps every rank has made by now)
    while True:
        t, t1 = origin_ns + steps * step_ns, origin_ns + (steps + 1) * step_ns
        time.sleep(max(0.0, (t1 - time.monotonic_ns()) / 1e9))
        steps += 1
        with lock:
            state["steps"] = steps
            state["records"].append((steps, t, t1))
            config = state["config"]
        w.emit(L.STEP, 0, 0, 1, steps, t, t1, 0.0)
        w.set_steps(steps, t1)
        ctl.write_now(Now(updated_ns=t1, step=steps + 1, source=source, phase_id=0, collective_id=0, phase_since_ns=t1,
                          step_t0_ns=t1, moved_ns=t1, longest_ns=t1 - t, where="", waiting_in=""))
        count = steps - 1  # (Kineto's count: -1 before the first optimizer step)
        if config and active is None:
            start, roundup = int(key(config, "PROFILE_START_ITERATION", "0")), \
                int(key(config, "PROFILE_START_ITERATION_ROUNDUP", "-1"))
            if count > start:  # (the start is past: Kineto moves it to this count, rounded up)
                start = -(-count // roundup) * roundup if roundup > 0 else count
                config = re.sub(r"^PROFILE_START_ITERATION=.*$", f"PROFILE_START_ITERATION={start}", config, flags=re.M)
                with lock:
                    state["config"] = config
            if count == start:
                active = (start, start + int(key(config, "ACTIVITIES_ITERATIONS")), key(config, "ACTIVITIES_LOG_FILE"))
                report.update(mode="iterations", started_at=start)
        if active is not None and count >= active[1]:
            write(active[2])
            active = None
            with lock:
                state["config"] = None


if __name__ == "__main__":
    main()
