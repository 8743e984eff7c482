"""One line per rank of the job."""

from __future__ import annotations

from rich.text import Text

from ...monitor.state import View
from ..format import fit, seconds


def ranks_panel(view: View, width: int = 0, shown: int | None = None) -> Text:
    """One line per rank: its GPU and SM activity, step time, own work, time in collectives, data
    wait and largest phase; * marks the rank shown in detail (shown: its PID), the straggler is named."""
    shown = shown if shown is not None else view.training.pid if view.training else None
    straggler = view.straggler if view.verdict.code == "straggler" else None
    out = Text(fit(f"{'rank':>5} {'pid':>7} {'GPU':>3} {'SM':>5} {'step p50/p95 ms':>16} {'own ms':>7} "
                   f"{'comm ms':>13} {'data':>5}  top phase", width or 200), "dim")
    for r in view.ranks:
        mark = "*" if r.pid == shown else " "
        gpu = "-" if r.gpu is None else str(r.gpu)
        sm = "n/a" if r.sm_active is None else f"{r.sm_active:.0f}%" + ("~" if r.sm_coarse else "")
        step = "n/a" if r.step_p50_ms is None else f"{r.step_p50_ms:.1f}/{r.step_p95_ms:.1f}"
        own = "n/a" if r.own_ms is None else f"{r.own_ms:.1f}"
        comm = "n/a" if r.comm_ms is None else f"{r.comm_ms:.1f} ({r.comm_share:.0%})"
        data = "n/a" if r.data_wait_share is None else f"{r.data_wait_share:.0%}"
        work = {k: v for k, v in r.phases.items() if k != "comm"}
        total = sum(r.phases.values())
        top = max(work, key=lambda k: work[k]) if work else None
        phase = f"{top} {work[top] / total:.0%}" if top and total > 0 else "-"
        rank = "?" if r.rank is None else str(r.rank)
        line = (f"{mark}{rank:>4} {r.pid:>7} {gpu:>3} {sm:>5} {step:>16} {own:>7} {comm:>13} {data:>5}  {phase}")
        flag = ""
        if r.state != "alive":
            line += "  exited"
        elif r.stalled:
            quiet = r.since_step_s if r.since_step_s is not None else r.now_phase_s
            flag = f"  STALLED in {r.now_phase or '?'}" + (f", no step for {seconds(quiet)}" if quiet else "")
        elif straggler is not None and r.pid == straggler.pid:
            flag = f"  STRAGGLER {straggler.ratio:.1f}x"
        line = fit(line + flag, width or 200)
        out.append("\n" + line[:len(line) - len(flag)] if flag else "\n" + line, "dim" if r.state != "alive" else "")
        if flag:
            out.append(line[len(line) - len(flag):], "bold red" if r.stalled else "bold yellow")
    return out
