"""The header: who, how long, how fast."""

from __future__ import annotations

import time

from rich.text import Text

from ...channel.procinfo import how_it_ended
from ...channel.text import safe_text
from ...model import TrainingSnapshot
from ...monitor.state import View
from ..format import duration, seconds, short_command, step_time, throughput_words


def header(view: View, source_label: str, window: View | None = None, width: int = 0, keep_label: bool = False) -> Text:
    """Who, how long, how fast. window: the window view, which the steps/s and throughput come from
    (default: view). width: fit it there, so it never wraps (0: no limit): rates the width cannot
    hold are left out, the command is cut, then the label and "last numbers kept" left out; what
    still does not fit is cut with "…". keep_label (a replay: what is shown is not live): the
    label is never left out, only its details, first first ("[replay · 12/36 · 1 bad line
    skipped]", "[replay · 1 bad line skipped]", "[replay]"); the room it needs is kept before the
    step time's, and all of it before the other rates'."""
    t, p = view.training, view.process
    pid = t.pid if t else p.pid if p else None
    what = ""
    if t and t.argv:
        what = safe_text(short_command(t.argv) + (f" [+{t.argv_cut} args cut]" if t.argv_cut else ""), 200)
    elif p:
        target = next((x for x in p.procs if x.role == "target"), None)
        if target is not None and isinstance(target.name, str):
            what = safe_text(target.name, 40)
    exited = at = kept = how = ""
    if p and not p.alive:
        exited = "  PROCESS EXITED"
        at = time.strftime(" at %H:%M:%S", time.localtime(p.exited_at)) if p.exited_at else ""
        how = f" ({how_it_ended(p.exit_code)})" if p.exit_code is not None else ""
        kept = " · last numbers kept"
    paused = "  PAUSED" if view.paused else ""
    parts = source_label.split(" · ")  # a replay's: "replay", where it is, the bad lines it skipped
    tags = [f"  [{' · '.join(parts[:1] + parts[k:])}]" for k in range(1, len(parts) + 1)] if keep_label else [""]
    tag = tags[-1]  # (the least of the label kept: its room is taken before the step time's, all of it before the rest's)
    rest = Text()
    if t and t.world_size:
        rest.append(f" · rank {t.rank}/{t.world_size}", "dim")
    if t:
        r = (window or view).training or t
        rest.append(f" · up {duration(t.uptime_s)} · step {t.steps:,}")
        rates = [f" · {step_time(r.step_time_ms.mean)}/step{_gpu_beside(r)}"] if r.step_time_ms else []
        if r.steps_per_s:  # (the same number, inverted: beside it)
            rates = [rates[0] + f" ({r.steps_per_s:.3g}/s)"] if rates else [f" · {r.steps_per_s:.3g} steps/s"]
        rates += [f" · {words}" for words in throughput_words(r.throughput_per_s)]
        if view.stall is not None and view.stall.stalled:  # (the rates are the steps before it stopped)
            rates = [f" · no step for {seconds(view.stall.quiet_s)}"]
        fixed = len(exited) + len(how) + len(paused)
        for k, rate in enumerate(rates):  # a narrow terminal keeps what fits, the step time first
            if not width or 7 + 12 + len(f"PID {pid} ") + len(rest.plain) + fixed + len(tags[-1 if k == 0 else 0]) \
                    + len(rate) <= width:
                rest.append(rate)
    optional = {"label": "" if keep_label else f"  [{source_label}]", "kept": kept, "at": at}
    if width:  # the command is cut first (to 24 characters, then 12), left out in turn: the label, "kept", the time
        room = width - 7 - (len(f"PID {pid} ") if pid else 0) - len(rest.plain) - len(exited) - len(paused)
        room -= len(how)
        tag = next((t for t in tags if room - len(t) - min(len(what), 12) >= 0), tags[-1])  # (details as room allows)
        room -= len(tag)
        for name, keep in (("label", 24), ("kept", 12), ("at", 12)):
            if room - min(len(what), keep) < sum(map(len, optional.values())):
                optional[name] = ""
        left = room - sum(map(len, optional.values()))
        if len(what) > left:
            what = what[:left - 1] + "…" if left > 4 else ""
    else:
        tag = tags[0]
    out = Text()
    out.append("tuimon ", "bold")
    if pid:
        out.append(f"PID {pid} " if what else f"PID {pid}", "bold cyan")
    out.append(what)
    out.append_text(rest)
    if exited:
        out.append(f"{exited}{optional['at']}{how}", "bold red")
    out.append(optional["kept"], "dim")
    out.append(paused, "bold reverse")
    out.append(optional["label"] or tag, "dim")
    if width and out.cell_len > width:  # (a terminal too narrow for even the essentials)
        out.truncate(width - 1)
        out.append("…")
    return out


def _gpu_beside(t: TrainingSnapshot) -> str:
    """The GPU's time per step (CUDA events), beside the host's: ' (GPU 69.3 ms)'."""
    ms = t.gpu.step_mean_ms if t.gpu is not None else None
    return f" (GPU {step_time(ms)})" if ms is not None else ""
