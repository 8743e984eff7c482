"""The training process, its workers and other subprocesses, and GPU memory."""

from __future__ import annotations

from rich.text import Text

from ...analysis.memory import forecast as memory_forecast
from ...channel.text import safe_text
from ...model import ProcRow, num
from ...model.units import human_bytes
from ...monitor.state import View
from ..format import value


def process_panel(view: View, window: View | None = None) -> Text:
    """The training process (and its launcher, when the channel is a descendant's), its DataLoader
    workers, other subprocesses. Whether it lives comes from view; CPU and memory from window (the
    window view: 1 s CPU readings jitter, and each redraw is bytes to the terminal). Memory is PSS
    where readable: forked workers share most of their pages, which RSS would count once each."""
    if view.process is not None and not view.process.alive:
        return Text("process exited", "bold red")
    p = (window or view).process or view.process
    if not p:
        return Text(view.problems.get("process") or "no process data", "dim")
    out = Text()
    target = next((r for r in p.procs if r.role == "target"), None)
    loop = next((r for r in p.procs if r.loop), None) or target
    rest = [r for r in p.procs if r is not loop and r is not target]
    workers = [r for r in rest if r.name == "pt_data_worker"]
    ranks = [r for r in rest if r.rank is not None and r not in workers]
    others = [r for r in rest if r not in workers and r not in ranks]
    if loop is not None:  # (loop: the process whose channel is read)
        out.append("training " if loop.loop else "target " if loop.rank is None else f"rank {loop.rank} ", "dim")
        out.append(safe_text(str(loop.name if isinstance(loop.name, str) else "?"), 30))
        state = loop.state if isinstance(loop.state, str) else "?"
        out.append(f" {loop.pid}  CPU {_cpu([loop])}  {_mem([loop])}  threads {value(loop.threads)}  {state}")
    if target is not None and loop is not target:
        out.append("\nlauncher ", "dim")
        out.append(safe_text(str(target.name if isinstance(target.name, str) else "?"), 30))
        out.append(f" {target.pid}  CPU {_cpu([target])}")
    for label, group in (("other ranks", ranks), ("DataLoader workers", workers), ("other subprocesses", others)):
        if group:
            out.append(f"\n{label} {len(group)}", "dim")
            out.append(f"  CPU {_cpu(group)}  {_mem(group)}")
            per = "  ".join(("" if r.rank is None else f"rank {r.rank} ") + f"{r.pid}:{r.cpu_percent:.0f}%"
                            for r in group[:6] if num(r.cpu_percent) is not None)
            out.append(f"  ({per}{' ...' if len(group) > 6 else ''})", "dim")
    if p.loop_cpu is not None:
        wait = p.loop_cpu_wait
        out.append(f"\n{'loop' if view.training is not None else 'main'} thread CPU {p.loop_cpu:.0f}%" + (f", waiting for a core {wait:.0f}%" if wait and wait >= 0.5
                                                              else ""), "dim")
    mem = memory_line(window or view)
    if mem:
        out.append("\n" + mem)
    return out


def memory_line(view: View) -> str:
    """GPU memory: the caching allocator's numbers beside NVML's for the process, and headroom."""
    m = view.training.memory if view.training else None
    used, total = view.nvml_memory
    parts = []
    if m is not None:
        parts.append(f"GPU memory: allocated {human_bytes(m.allocated)}, reserved {human_bytes(m.reserved)}, "
                     f"peak {human_bytes(m.peak_allocated)}")
        if m.retries_per_step:
            parts.append(f"{m.retries_per_step:.2f} allocator retries per step (memory pressure: m)")
        elif m.alloc_retries:
            parts.append(f"{m.alloc_retries} allocator retries (memory pressure: m)")
        if (near := memory_forecast(m)) is not None:
            parts.append(near)
    if used is not None:
        parts.append(f"NVML {human_bytes(used)}" + (f" of {human_bytes(total)} ({human_bytes(total - used)} free)"
                                                    if total else ""))
    return " · ".join(parts)


def _cpu(rows: list[ProcRow]) -> str:
    return f"{sum(c for r in rows if (c := num(r.cpu_percent)) is not None):.0f}%"


def _mem(rows: list[ProcRow]) -> str:
    """PSS when every process's is readable; else RSS, said as such (it counts shared pages twice)."""
    pss = [r.pss for r in rows if r.pss is not None]
    if len(pss) == len(rows):
        return f"PSS {human_bytes(sum(pss))}"
    rss = sum(v for r in rows if (v := num(r.rss)) is not None)
    return f"RSS {human_bytes(rss)}" + (" (shared pages counted per process)" if len(rows) > 1 else "")
