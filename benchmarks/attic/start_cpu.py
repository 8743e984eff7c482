"""The CPU `tuimon attach`'s start spends before its first frame can be drawn, build beside build: the
imports, as the CLI makes them (the command's module through cli.main, then the UI's with the GC off, as
cli.tui), in a fresh process, the builds alternating. CPU, not wall time: on a shared or virtual machine
the wall time of one start moves by ~0.1 s between runs; the CPU of the imports by a few ms.

    python benchmarks/start_cpu.py [--rounds 20] TREE [TREE ...]

TREE: a build's folder (e.g. `git worktree add /tmp/old HEAD~3`, its extension built), run from there.
Prints, for each, the process's CPU seconds after the imports: min, p25, median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

CHILD = r"""
import contextlib, gc, io, resource, sys, os
sys.path.insert(0, os.getcwd())
import tuimon.cli.main as m
with contextlib.redirect_stdout(io.StringIO()):
    m._command("attach", "cmd_ls")(None)  # (the command's module, imported as `attach` imports it)
gc.disable()  # (as cli.tui, for the UI's imports)
import tuimon.monitor.session, tuimon.ui.app, tuimon.ui.screens.main  # noqa: E401,F401
r = resource.getrusage(resource.RUSAGE_SELF)
print(r.ru_utime + r.ru_stime)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("trees", nargs="+")
    a = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    got: dict[str, list[float]] = {t: [] for t in a.trees}
    for r in range(a.rounds + 1):  # (the first round writes each build's bytecode: not counted)
        for tree in a.trees if r % 2 else a.trees[::-1]:
            out = subprocess.run([sys.executable, "-c", CHILD], cwd=tree, env=env, capture_output=True, text=True,
                                 check=True)
            if r:
                got[tree].append(float(out.stdout))
    for tree, v in got.items():
        v.sort()
        print(f"{tree}: CPU after the imports min {v[0]:.3f} s, p25 {v[len(v) // 4]:.3f}, "
              f"median {statistics.median(v):.3f} (n={len(v)})")


if __name__ == "__main__":
    main()
