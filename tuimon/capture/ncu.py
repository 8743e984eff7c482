"""Nsight Compute hand-off (issue 41): for a window's top kernels, the `ncu` command that profiles
one launch of that kernel in this job's command line.

    ncu --kernel-name regex:'^NAME$' --launch-skip K --launch-count 1 -o tuimon-<pid>-<n> -- <command>

NAME is the kernel's function name (ncu's default --kernel-name-base, "function": no return type,
namespace, template arguments or parameters), regex-escaped, so every instantiation of that
function matches. K, the rule: the launches of kernels of that function name per step in the
window (all of them in the trace, each instantiation counted) times WARMUP_STEPS, so the launch
profiled is the first of step WARMUP_STEPS + 1 of the new run (past cuDNN's and the allocator's
first steps); a window without steps counts as one step. Each word is shell-quoted."""

from __future__ import annotations

import re
import shlex
from dataclasses import replace

from ..model import CaptureStatus, CaptureSummary, KernelRow

WARMUP_STEPS = 5  # the probe's warm-up (probe/core.py WARMUP_STEPS): steps skipped before the launch profiled
TOP = 3  # kernels a window hands on


def function_name(name: str) -> str:
    """The function name of a demangled kernel name, as ncu's --kernel-name-base function has it:
    'void at::native::f<4, X<float> >(int, Y)' -> 'f'; 'ampere_sgemm_128x64_nn' as it is."""
    s = name.strip()
    if s.endswith(")"):  # the parameters
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                s = s[:i]
                break
    out, depth = [], 0
    for ch in s:  # the template arguments, nested
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip()
    s = s.rsplit(" ", 1)[-1]  # the return type
    s = s.rsplit("::", 1)[-1]  # the namespace
    return s if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", s) else ""


def ncu_command(function: str, launches_per_step: float, pid: int, n: int, command: list[str],
                warmup_steps: int = WARMUP_STEPS) -> str:
    """The shell line that profiles one launch of `function` in `command` (the rule: above)."""
    skip = round(launches_per_step * warmup_steps)
    words = ["ncu", "--kernel-name", f"regex:^{re.escape(function)}$", "--launch-skip", str(skip),
             "--launch-count", "1", "-o", f"tuimon-{pid}-{n}", "--", *command]
    return shlex.join(words)


def ncu_commands(kernels: list[KernelRow], steps: int, pid: int, command: list[str], top: int = TOP) -> list[str]:
    """One command per top kernel function (top first), for a window of `steps` steps (0: none
    known, counted as one)."""
    if not command:
        return []
    out: list[str] = []
    seen: set[str] = set()
    for k in kernels:
        fn = function_name(k.name)
        calls = k.function_calls or k.calls
        if not fn or fn in seen:
            continue
        seen.add(fn)
        out.append(ncu_command(fn, calls / max(1, steps), pid, len(out) + 1, command))
        if len(out) >= top:
            break
    return out


def window_steps(status: CaptureStatus) -> int:
    return status.last_step - status.first_step + 1 if 1 <= status.first_step <= status.last_step else 0


def with_ncu_commands(summary: CaptureSummary, status: CaptureStatus, pid: int, command: list[str]) -> CaptureSummary:
    """The summary with its ncu commands, for the job's command line (its channel's argv)."""
    if summary.state != "done" or not summary.kernels or summary.ncu_commands:
        return summary
    cmds = ncu_commands(summary.kernels, window_steps(status), pid, command)
    return replace(summary, ncu_commands=cmds) if cmds else summary
