#!/usr/bin/env -S python3 -S
"""A stand-in for Nsight Systems' CLI where there is none (CI): the interactive-session commands
tuimon runs (launch, start, stop, shutdown) and `nsys stats`, with their exit codes and files.
Every call is logged (FAKE_NSYS_LOG, JSON lines with CLOCK_MONOTONIC); sessions live as files in
FAKE_NSYS_DIR. FAKE_NSYS_STOP_S: how long stop takes (default 0.5); FAKE_NSYS_FAIL=stop|start:
that command fails as a killed nsys would (=kern_sum: `nsys stats`' kernel report fails);
FAKE_NSYS_LAUNCHES: the kernel launches its cuda_api_sum reports (default 36, one a kernel row, as
in a complete report; more: a report whose buffers lost kernels). (It runs with -S: no
sitecustomize, so the probe that `tuimon run` installs stays out of it, as it stays out of the
real nsys.)"""

import json
import os
import sys
import time

args = sys.argv[1:]
folder = os.environ.get("FAKE_NSYS_DIR", "/tmp")
if os.environ.get("FAKE_NSYS_LOG"):
    with open(os.environ["FAKE_NSYS_LOG"], "a") as f:
        f.write(json.dumps({"t": time.monotonic(), "args": args}) + "\n")


def opt(name):
    for k, a in enumerate(args):
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
        if a == name and k + 1 < len(args):
            return args[k + 1]
    return None


def session_file():
    return os.path.join(folder, f"session-{opt('--session') or opt('--session-new')}.json")


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


cmd = args[0] if args else ""
if cmd == "--version":
    print("NVIDIA Nsight Systems version 2099.1.0 (fake)")
elif cmd == "launch":
    app = next(k for k, a in enumerate(args[1:], 1) if not a.startswith("-"))
    with open(session_file(), "w") as f:
        json.dump({"state": "launched"}, f)
    pid = os.fork()
    if pid == 0:
        os.execvp(args[app], args[app:])
    _, status = os.waitpid(pid, 0)
    try:
        os.unlink(session_file())  # the session ends with the application
    except OSError:
        pass
    sys.exit(os.waitstatus_to_exitcode(status))
elif cmd in ("start", "stop", "shutdown"):
    path = session_file()
    if not os.path.exists(path):
        fail(f"Error: session {opt('--session')} not found.")
    with open(path) as f:
        state = json.load(f)
    if os.environ.get("FAKE_NSYS_FAIL") == cmd:
        fail("Error: the profiler agent is not responding.")
    if cmd == "start":
        if state["state"] != "launched":
            fail(f"Error: the session is {state['state']}.")
        state = {"state": "collecting", "output": opt("-o")}
    elif cmd == "stop":
        if state["state"] != "collecting":
            fail("Error: no collection is running.")
        with open(path, "w") as f:
            json.dump({**state, "state": "writing"}, f)
        time.sleep(float(os.environ.get("FAKE_NSYS_STOP_S", "0.5")))
        with open(state["output"] + ".nsys-rep", "wb") as f:
            f.write(b"fake report " * 100)
        state = {"state": "launched"}
    else:
        os.unlink(path)
        sys.exit(0)
    with open(path, "w") as f:
        json.dump(state, f)
elif cmd == "stats":
    report = opt("--report")
    print(f"Processing [{args[-1]}] with [{report}]...")
    if report == "cuda_gpu_kern_sum" and os.environ.get("FAKE_NSYS_FAIL") == "kern_sum":
        fail("ERROR: Report 'cuda_gpu_kern_sum' could not be analyzed")
    if report == "cuda_gpu_kern_sum":
        print("Time (%),Total Time (ns),Instances,Avg (ns),Name\n71.5,900000,12,75000,ampere_bf16_gemm\n28.5,360000,24,15000,elementwise_kernel")
    elif report == "nvtx_sum":
        print("Time (%),Total Time (ns),Instances,Avg (ns),Range\n60.0,1000000,5,200000,:forward\n40.0,700000,5,140000,:backward")
    else:
        # one launch a kernel row, as in a complete report; FAKE_NSYS_LAUNCHES: a report whose buffers lost kernels
        launches = int(os.environ.get("FAKE_NSYS_LAUNCHES", "36"))
        print(f"Time (%),Total Time (ns),Num Calls,Avg (ns),Name\n80.0,500000,{launches},8333,cudaLaunchKernel\n"
              f"20.0,125000,{launches},2083,cudaGraphLaunch")
else:
    fail(f"fake nsys: unknown command {cmd!r}")
