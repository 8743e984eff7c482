"""`tuimon` commands: the parser and where each command goes."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from .. import __version__
from . import options as opt


def _command(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """The command's function, imported when it runs: a command loads only its own modules (the
    monitor's first frame does not wait for the imports of record, trace, export or doctor)."""
    def run(args: argparse.Namespace) -> int:
        import gc
        import importlib

        # Imports allocate much and free almost nothing (modules, classes, functions: they live as long
        # as the process): the cyclic GC's passes over them are CPU the monitor's first frame waits for,
        # and each full pass later walks them again. So no GC while importing, and what the imports
        # made is frozen (never walked again; the little cyclic garbage among it stays). cli.tui keeps
        # the GC off until the first paint.
        was_on = gc.isenabled()
        gc.disable()
        try:
            command = getattr(importlib.import_module(f"tuimon.cli.{module}"), name)
        finally:
            gc.freeze()
            if was_on:
                gc.enable()
        return command(args)

    return run


cmd_attach, cmd_ls, cmd_replay, cmd_top = (_command("attach", n) for n in ("cmd_attach", "cmd_ls", "cmd_replay",
                                                                            "cmd_top"))
cmd_baseline_save, cmd_baseline_show = _command("baseline", "cmd_baseline_save"), _command("baseline",
                                                                                           "cmd_baseline_show")
cmd_capture, cmd_export, cmd_trace = _command("capture", "cmd_capture"), _command("export", "cmd_export"), \
    _command("trace", "cmd_trace")
cmd_demo, cmd_run = _command("run", "cmd_demo"), _command("run", "cmd_run")


COMMANDS = ("attach", "inject", "run", "demo", "top", "capture", "replay", "record", "trace", "export", "baseline",
            "doctor", "ls")


def parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; only: that command's alone (the others' ~100 arguments cost ~12 ms
    of the monitor's start on the dev machine; `tuimon COMMAND ...` needs only its own)."""

    def want(command: str) -> bool:
        return only is None or only == command

    p = argparse.ArgumentParser(prog="tuimon", description="A live monitor for PyTorch training processes on GPUs.")
    p.add_argument("--version", action="version", version=f"tuimon {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")

    def interval(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--interval", type=opt.INTERVAL, default=1.0, help="seconds between samples (0.1 to 3600; "
                                                                            "default 1)")

    def metrics_port(sp: argparse.ArgumentParser, required: bool = False) -> None:
        sp.add_argument("--port" if required else "--metrics-port", dest="port", type=opt.PORT, required=required,
                        help="serve Prometheus metrics on this port (/metrics)")
        sp.add_argument("--addr", default="127.0.0.1", help="the address to serve metrics on (default "
                                                            "127.0.0.1: this machine only; 0.0.0.0: every interface)")

    def baseline(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--baseline", type=opt.baseline_file, metavar="FILE",
                        help="compare the job with a baseline (tuimon baseline save): deltas and a regression alert")

    def gpus(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--gpus", type=opt.gpu_list, help="only these GPUs, by NVML index as nvidia-smi shows them "
                                                          "(e.g. 0,1)")

    if want("attach"):
        a = sub.add_parser("attach", help="monitor a running process by PID (any process; its loop's timings need "
                                          "the probe)")
        a.add_argument("pid", type=int, help="the process (a launcher such as torchrun: its rank 0 is shown)")
        a.add_argument("--once", action="store_true", help="print one snapshot and exit")
        a.add_argument("--json", action="store_true", help="with --once: as JSON")
        a.add_argument("--window", type=opt.WINDOW, help="with --once: sample this many seconds first (0 to 3600; "
                                                         "default 0.5)")
        a.add_argument("--plain", action="store_true", help="a line of text per interval instead of the TUI")
        a.add_argument("--inject", action="store_true", help="first load the probe into the job (every rank of a "
                                                             "launcher on this node), as `tuimon inject` does")
        interval(a)
        gpus(a)
        baseline(a)
        a.set_defaults(func=cmd_attach)

    if want("inject"):
        inj = sub.add_parser("inject", help="load the probe into a running job started without tuimon (ptrace; its "
                                            "ranks when PID is a launcher): exit 0 once it runs, 2 with the reason")
        inj.add_argument("pid", type=int, help="the job, or its launcher (torchrun, a shell)")
        inj.add_argument("--wait", type=opt.WINDOW, default=15.0, help="seconds to wait for the job's main thread to "
                                                                       "run it (default 15)")
        inj.set_defaults(func=_command("inject", "cmd_inject"))

    if want("run"):
        r = sub.add_parser("run", help="run a training command with the probe installed (no code change) and "
                                       "monitor it")
        r.add_argument("--headless", action="store_true", help="no monitor: tuimon becomes the job (exec: the same PID, "
                                                               "so its signals and exit code are the job's own); attach "
                                                               "later with `tuimon attach PID`")
        r.add_argument("--plain", action="store_true", help="a line of text per interval instead of the TUI")
        r.add_argument("--nsys", action="store_true", help="run it under Nsight Systems: `c` then records nsys windows")
        r.add_argument("--nsys-args", default="", help="more nsys options as one string, split between `nsys launch` and `nsys start` "
                                                               "(write it --nsys-args=\"--sample=none\": a value starting with - "
                                                               "needs the =)")
        metrics_port(r)
        interval(r)
        baseline(r)
        r.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
        r.set_defaults(func=cmd_run)

    if want("demo"):
        d = sub.add_parser("demo", help="run the bundled training workload under the monitor (q stops it)")
        d.add_argument("--seconds", type=opt.DURATION, default=0, help="stop after this long (0: until q or Ctrl-C)")
        d.add_argument("--headless", action="store_true", help="no monitor: the workload alone, with the probe")
        d.add_argument("--plain", action="store_true", help="a line of text per interval instead of the TUI")
        interval(d)
        d.set_defaults(func=cmd_demo)

    if want("top"):
        t = sub.add_parser("top", help="all GPUs, their processes and the host; no training process")
        t.add_argument("--once", action="store_true", help="print one snapshot and exit")
        t.add_argument("--json", action="store_true", help="with --once: as JSON")
        t.add_argument("--window", type=opt.WINDOW, help="with --once: sample this many seconds first (default 0.5)")
        interval(t)
        gpus(t)
        t.set_defaults(func=cmd_top)

    if want("capture"):
        cap = sub.add_parser("capture", help="ask a running job for a capture window and print what it found")
        cap.add_argument("pid", type=int, help="the running job (started with the probe: tuimon run)")
        g = cap.add_mutually_exclusive_group()
        g.add_argument("--steps", type=opt.CAPTURE_STEPS, help="window length in steps (1 to 500; default 10, or "
                                                               "10 s when the job has counted no steps)")
        g.add_argument("--seconds", type=opt.CAPTURE_SECONDS, help="window length in seconds (0.1 to 300), for loops "
                                                                   "without steps")
        cap.add_argument("--memory", action="store_true", help="the caching allocator's history instead of a profile "
                                                               "(default 5 steps): a snapshot PyTorch's memory viewer "
                                                               "opens, and the largest live allocations at its peak")
        cap.add_argument("--wait", action="store_true", help="wait for the result and print its summary")
        cap.add_argument("--timeout", type=opt.TIMEOUT, default=300, help="with --wait: seconds to wait at most "
                                                                         "(default 300)")
        cap.add_argument("--json", action="store_true", help="with --wait: the result as JSON on standard output "
                                                             "(its state, summary and cost to the job; the rest goes "
                                                             "to standard error)")
        cap.set_defaults(func=cmd_capture)

    if want("replay"):
        rp = sub.add_parser("replay", help="show a recording (tuimon record) through the same UI")
        rp.add_argument("file", help="a recording made by tuimon record (JSON Lines; v1 and v2)")
        rp.add_argument("--speed", type=opt.SPEED, default=1.0, help="2: twice as fast (0.01 to 1000)")
        baseline(rp)
        rp.set_defaults(func=cmd_replay)

    if want("record"):
        rec = sub.add_parser("record", help="record what the monitor sees of PID (GPUs, processes, channel, "
                                            "captures) to a file")
        rec.add_argument("pid", type=int, help="the process to record (any PID; its loop timings need the probe)")
        rec.add_argument("-o", "--output", required=True, help="the recording (JSON Lines); - for standard output")
        rec.add_argument("--force", action="store_true", help="overwrite an existing file")
        rec.add_argument("--seconds", type=opt.DURATION, default=0, help="stop after this long (0: when PID exits)")
        rec.add_argument("--note", default="", help="what was running, stored in the file's header")
        interval(rec)
        rec.set_defaults(func=_command("record", "cmd_record"))

    if want("trace"):
        tr = sub.add_parser("trace", help="a job's steps and phases per rank (and GPU metrics) as a Chrome/Perfetto "
                                          "trace: the steps a live job's rings still hold, or a recording")
        tr.add_argument("pid", type=int, nargs="?", help="a live job (its ranks on this node, from their channels)")
        tr.add_argument("--recording", metavar="FILE", help="a recording (tuimon record) instead of a live job")
        tr.add_argument("--minutes", type=opt.MINUTES, default=5.0, help="of a live job: the last this many minutes "
                                                                          "that its channels still hold (default 5)")
        tr.add_argument("-o", "--output", required=True, help="the trace (JSON; .gz: gzip); - for standard output")
        tr.add_argument("--force", action="store_true", help="overwrite the output if it exists")
        tr.set_defaults(func=cmd_trace)

    if want("export"):
        ex = sub.add_parser("export", help="serve GPU and training metrics to Prometheus (no screen)")
        ex.add_argument("pid", type=int, nargs="?", help="the job (any PID; its loop's numbers need the probe); "
                                                        "none: the GPUs only")
        metrics_port(ex, required=True)
        interval(ex)
        gpus(ex)
        baseline(ex)
        ex.set_defaults(func=cmd_export)

    if want("baseline"):
        bl = sub.add_parser("baseline", help="save a known-good run's numbers, to compare jobs with (--baseline)")
        bls = bl.add_subparsers(dest="baseline_cmd", metavar="ACTION", required=True, help="save or show")
        save = bls.add_parser("save", help="measure a running job (or read a recording) and save its baseline")
        src = save.add_mutually_exclusive_group(required=True)
        src.add_argument("pid", type=int, nargs="?", help="the running job to measure (it needs the probe: tuimon run)")
        src.add_argument("--recording", metavar="FILE", help="a recording (tuimon record) instead of a running job")
        save.add_argument("-o", "--output", required=True, help="the baseline file (JSON); - for standard output")
        save.add_argument("--seconds", type=opt.BASELINE_SECONDS, default=30,
                          help="with PID: measure this long (1 to 86400; default 30; Ctrl-C ends it early)")
        save.add_argument("--force", action="store_true", help="overwrite an existing file")
        interval(save)
        save.set_defaults(func=cmd_baseline_save)
        show = bls.add_parser("show", help="what a baseline file holds")
        show.add_argument("file", help="a baseline file (tuimon baseline save)")
        show.set_defaults(func=cmd_baseline_show)

    if want("doctor"):
        doc = sub.add_parser("doctor", help="what works on this machine and what does not, with fixes")
        doc.set_defaults(func=_command("doctor", "cmd_doctor"))

    if want("ls"):
        ls = sub.add_parser("ls", help="your processes that have a tuimon channel, then your Python processes on a "
                                      "GPU without one")
        ls.set_defaults(func=cmd_ls)
    return p


def _check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Combinations that make no sense are refused, not silently ignored."""
    once = getattr(args, "once", None)
    if once is not None and not once:
        for flag in ("json", "window"):
            if getattr(args, flag, None):
                p.error(f"--{flag} goes with --once")
    if getattr(args, "window", 1) is None:
        args.window = 0.0
    if getattr(args, "once", False) and getattr(args, "plain", False):
        p.error("--once and --plain: choose one")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = parser(argv[0] if argv and argv[0] in COMMANDS else None)
    if not argv:
        p.print_help(sys.stderr)
        return 2
    args = p.parse_args(argv)
    if args.cmd is None:
        p.print_help(sys.stderr)
        return 2
    _check(p, args)
    try:
        return args.func(args)
    except BrokenPipeError:  # `tuimon attach PID --plain | head`: the reader left; so do we, quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
