"""`tuimon export`: the monitor with no screen, serving its numbers to Prometheus."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from ..channel import procinfo
from ..monitor.session import LiveSession
from ..monitor.state import MonitorState

if TYPE_CHECKING:
    import argparse

    from ..export.server import Exporter


EVERY_INTERFACE = {"0.0.0.0", "::", ""}  # (an address that binds every interface, IPv4 or IPv6)


def host_port(addr: str, port: int) -> str:
    """addr:port, an IPv6 address in brackets ([::1]:9400), as a URL writes it."""
    return f"[{addr}]:{port}" if ":" in addr and not addr.startswith("[") else f"{addr}:{port}"


def start_exporter(port: int, addr: str) -> Exporter | None:
    """An Exporter on addr:port, or None after saying why (port taken, no prometheus-client)."""
    try:
        from ..export.server import Exporter
    except ImportError as e:  # (a dependency: only a broken install lacks it)
        print(f"tuimon: metrics need prometheus-client ({e}): pip install prometheus-client", file=sys.stderr)
        return None
    try:
        exporter = Exporter(port, addr)
    except OSError as e:
        print(f"tuimon: cannot serve metrics on {host_port(addr, port)}: {e.strerror or e}", file=sys.stderr)
        return None
    if addr.strip("[]") in EVERY_INTERFACE:
        print(f"tuimon: warning: metrics are served on every interface ({addr or 'all'}): whoever reaches port "
              f"{exporter.port} of this machine reads them, unauthenticated (--addr 127.0.0.1: this machine only)",
              file=sys.stderr)
    return exporter


def cmd_export(args: argparse.Namespace) -> int:
    if args.pid is not None and procinfo.start_ticks(args.pid) is None:
        print(f"tuimon: no process with PID {args.pid}", file=sys.stderr)
        return 2
    exporter = start_exporter(args.port, args.addr)
    if exporter is None:
        return 2
    session, state = LiveSession(args.pid, args.interval, gpus=args.gpus), MonitorState(baseline=args.baseline)
    try:
        no_gpus = session.gpus.error  # (opens NVML: said before the first scrape)
        what = [f"PID {args.pid}"] if args.pid is not None else []
        if no_gpus:
            print(f"tuimon: no GPU series: {no_gpus} (served as tuimon_source_up{{source=\"nvml\"}} 0)",
                  file=sys.stderr)
        else:
            what.append("the GPUs")
        print(f"tuimon: serving {' and '.join(what) or 'tuimon_source_up alone'} on "
              f"http://{host_port(args.addr, exporter.port)}/metrics every {args.interval:g} s (Ctrl-C stops)",
              file=sys.stderr)
        while True:
            t = time.monotonic()
            state.apply(session.poll())
            exporter.publish(state.view())
            time.sleep(max(0.0, args.interval - (time.monotonic() - t)))
    except KeyboardInterrupt:
        return 0
    finally:
        session.stop()
        exporter.close()
