"""One rank of a fake torchrun job for the Kineto-window tests: its channel (a segment with its rank,
steps every STEP_MS as its optimizer would count them, the probe's "now") and Kineto's daemon client
inside it, written from Kineto's structs and semantics (libkineto ActivityProfilerController: its
count is steps - 1; a config waits for PROFILE_START_ITERATION, or, when its count is already past
it at its next step, rounds that count up to PROFILE_START_ITERATION_ROUNDUP), asking the endpoint
every 0.1 s (Kineto: 5 s). Once its window of ACTIVITIES_ITERATIONS has run, it writes the fixture
trace where the config says and reports in OUT/rank<R>.json what it was handed and where it started.

usage: fake_kineto_rank.py ENDPOINT RANK WORLD STEP_MS ASK(0|1) SOURCE OUT
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


def key(config: str, k: str) -> str:
    found = re.search(rf"^{k}=(.*)$", config, re.M)
    assert found is not None, (k, config)
    return found.group(1)


def main() -> None:
    endpoint, rank, world, step_ms, ask, source, out = sys.argv[1:8]
    r, step_s = int(rank), float(step_ms) / 1000
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
    state: dict = {"steps": 0, "config": None}
    report: dict = {"rank": r, "pid": os.getpid()}

    def poll() -> None:  # Kineto's config thread
        while ask == "1":
            try:
                sock.sendto(K.encode("req", K.REQUEST.pack(3, 1, 0) + struct.pack("=i", os.getpid())),
                            K.abstract_address(endpoint))
                got = K.decode(sock.recv(1 << 16))
            except OSError:  # (no endpoint yet, or no answer)
                got = None
            if got is not None and got[1]:
                with lock:
                    state["config"] = got[1].decode()
                    report.update(config=state["config"], steps_at_config=state["steps"])
            time.sleep(0.1)

    threading.Thread(target=poll, daemon=True).start()
    print("ready", flush=True)
    active = None  # (start iteration, end iteration, log file)
    t = time.monotonic_ns()
    while True:
        time.sleep(step_s)
        t1 = time.monotonic_ns()
        with lock:
            state["steps"] += 1
            steps, config = state["steps"], state["config"]
        w.emit(L.STEP, 0, 0, 1, steps, t, t1, 0.0)
        w.set_steps(steps, t1)
        ctl.write_now(Now(updated_ns=t1, step=steps + 1, source=source, phase_id=0, collective_id=0, phase_since_ns=t1,
                          step_t0_ns=t1, moved_ns=t1, longest_ns=t1 - t, where="", waiting_in=""))
        t = t1
        count = steps - 1  # (Kineto's count: -1 before the first optimizer step)
        if config and active is None:
            start, roundup = int(key(config, "PROFILE_START_ITERATION")), int(key(config, "PROFILE_START_ITERATION_ROUNDUP"))
            if count > start:  # (the start is past: Kineto moves it to this count, rounded up)
                start = -(-count // roundup) * roundup
                config = config.replace(f"PROFILE_START_ITERATION={key(config, 'PROFILE_START_ITERATION')}",
                                        f"PROFILE_START_ITERATION={start}")
                with lock:
                    state["config"] = config
            if count == start:
                active = (start, start + int(key(config, "ACTIVITIES_ITERATIONS")), key(config, "ACTIVITIES_LOG_FILE"))
                report["started_at"] = start
        if active is not None and count >= active[1]:
            path = K.trace_file(active[2], os.getpid())
            shutil.copy(TRACE, path + ".tmp")
            os.rename(path + ".tmp", path)  # (as Kineto: written, then renamed)
            report["trace"] = path
            with open(os.path.join(out, f"rank{r}.json.tmp"), "w") as f:
                json.dump(report, f)
            os.rename(os.path.join(out, f"rank{r}.json.tmp"), os.path.join(out, f"rank{r}.json"))
            active = None
            with lock:
                state["config"] = None


if __name__ == "__main__":
    main()
