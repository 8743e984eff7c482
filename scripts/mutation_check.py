"""Mutation check: do the tests pin what tuimon's rules and exporter compute?

Each mutant is one change to one line of tuimon/analysis or tuimon/export (by default):
- a comparison's operator turned into its neighbour (< into <=, > into >=, == into !=, in into not in,
  and back), the classic boundary bug;
- a number of a module-level constant (a threshold, a limit) doubled (0 made 1).
Each mutant is written into a copy of the repository and the fast tests run against it (-x: the
first failure kills it); a mutant that passes every test survived. The score is killed / tried.

    .venv/bin/python scripts/mutation_check.py [--sample N --seed S] [--paths tuimon/analysis ...]
        [--tests FILE ...] [--list] [--again OUTPUT] [--jobs N]

A scoped run (one module or package, the fast unit tests for it), as the team reruns it:

    .venv/bin/python scripts/mutation_check.py --paths tuimon/analysis/verdicts \\
        --tests tests/test_diagnosis.py tests/test_rule_edges.py ... > run.txt
    .venv/bin/python scripts/mutation_check.py --paths tuimon/analysis/verdicts --tests ... --again run.txt

(--again: only the mutants an earlier run's output lists as survivors, after tests were added.)
--jobs N tries N at a time: the whole set is hours here (2 cores, ~30 s a mutant) and minutes on many
cores (2 H200s' host, 32 cores, --jobs 30: 316 mutants in 4.5 minutes). Python 3.12 finds a few more
mutants than 3.11 (comparisons inside f-strings are tokens of their own there).

The fast tests: the test files that import the mutated packages, less their tests that take over
FAST_S in a first run without mutants (real jobs, real Prometheus: the ones a boundary bug is least
likely to be caught by alone, and too slow to run hundreds of times); a test failing in that first run
is left out and named.
Prints a line per mutant, the survivors with their places, and the score last. The issue that
asked for it (42) wants at least 90% on comparisons and constants of tuimon/analysis and tuimon/export.
"""

from __future__ import annotations

import argparse
import ast
import io
import os
import queue
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tokenize
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATHS = ("tuimon/analysis", "tuimon/export")
FAST_S = 2.0  # a test slower than this in the first run is left out of each mutant's run
MUTANT_TIMEOUT_S = 300  # a mutant whose tests take longer (an endless loop made) counts as killed
SWAP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==", "in": "not in"}
OPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.In: "in",
       ast.NotIn: "not in"}


@dataclass(frozen=True)
class Mutant:
    path: str  # relative to the repository
    line: int
    col: int  # where the replaced text starts (0-based, on its line)
    old: str
    new: str

    def where(self) -> str:
        return f"{self.path}:{self.line}: {self.old} -> {self.new}"


def mutants(path: str) -> list[Mutant]:
    source = (ROOT / path).read_text()
    tree = ast.parse(source)
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    found: list[Mutant] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            left = node.left
            for op, right in zip(node.ops, node.comparators, strict=True):
                sym = OPS.get(type(op))
                if sym is not None:
                    tok = _operator_token(tokens, left, right)
                    if tok is not None:
                        new = "in" if sym == "not in" else SWAP[sym]
                        found.append(Mutant(path, tok[0], tok[1], tok[2], new))
                left = right
    for stmt in tree.body:  # module-level constants: NAME = ... (thresholds, limits)
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) else stmt.target if isinstance(
            stmt, ast.AnnAssign) else None
        if not (isinstance(target, ast.Name) and target.id.isupper() and getattr(stmt, "value", None) is not None):
            continue
        for sub in ast.walk(stmt.value):  # type: ignore[arg-type]
            if isinstance(sub, ast.Constant) and type(sub.value) in (int, float) and sub.end_lineno == sub.lineno:
                line = source.splitlines()[sub.lineno - 1]
                old = line[sub.col_offset:sub.end_col_offset]
                value = sub.value * 2 if sub.value else 1
                found.append(Mutant(path, sub.lineno, sub.col_offset, old, repr(value)))
    return found


def _operator_token(tokens, left: ast.expr, right: ast.expr):
    """(line, col, text) of the comparison operator between left and right, from the tokens."""
    start, end = (left.end_lineno, left.end_col_offset), (right.lineno, right.col_offset)
    words = [t for t in tokens if start <= t.start and t.end <= end and t.type in (tokenize.OP, tokenize.NAME)
             and t.string in ("<", "<=", ">", ">=", "==", "!=", "in", "not")]
    if not words:
        return None
    if words[0].string == "not":  # not in: both words replaced by 'in'
        return words[0].start[0], words[0].start[1], "not in"
    return words[0].start[0], words[0].start[1], words[0].string


def apply(copy: Path, m: Mutant) -> str:
    """Write the mutant into the copy; return the original text (to put back)."""
    f = copy / m.path
    text = f.read_text()
    lines = text.splitlines(keepends=True)
    line = lines[m.line - 1]
    if m.old == "not in":
        match = re.match(r"not\s+in", line[m.col:])
        assert match, m
        lines[m.line - 1] = line[:m.col] + m.new + line[m.col + match.end():]
    else:
        assert line[m.col:m.col + len(m.old)] == m.old, (m, line)
        lines[m.line - 1] = line[:m.col] + m.new + line[m.col + len(m.old):]
    f.write_text("".join(lines))
    return text


def fast_tests(copies: list[Path], files: list[str]) -> list[str]:
    """The node ids of the tests in files that pass in under FAST_S, from one run without mutants (a
    pytest per file, as many at a time as there are copies; a machine loaded by them reads some tests
    slower than FAST_S). A test that fails there is left out and named: it cannot tell a mutant from
    the original. Then the fast ones run together, as each mutant's run does: they must pass."""
    def run(i: int, f: str) -> str:
        copy = copies[i % len(copies)]  # (two files may share a copy here: no mutant is written yet)
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", "--durations=0",
                               "--durations-min=0", f], cwd=copy, capture_output=True, text=True, env=_env()).stdout

    with ThreadPoolExecutor(max_workers=len(copies)) as pool:
        outs = list(pool.map(run, range(len(files)), files))
    stdout = "\n".join(outs)
    (copies[0] / "durations.txt").write_text(stdout)
    spent: dict[str, float] = {}  # setup + call + teardown: a fixture that starts a real job is slow too
    for m in re.finditer(r"^([\d.]+)s (?:setup|call|teardown)\s+(.+?)\s*$", stdout, re.M):
        spent[m.group(2)] = spent.get(m.group(2), 0.0) + float(m.group(1))
    passed = re.findall(r"^PASSED (.+?)\s*$", stdout, re.M)
    failed = re.findall(r"^(?:FAILED|ERROR) .+$", stdout, re.M)  # (a test that passed and then failed its teardown too)
    bad = {t for t in passed if re.search(rf"^(?:FAILED|ERROR) {re.escape(t)}(?: - |\s*$)", stdout, re.M)}
    if failed:
        print(f"{len(failed)} tests fail without mutants, left out:\n  " + "\n  ".join(failed), flush=True)
    fast = [t for t in passed if t not in bad and spent.get(t, 0.0) <= FAST_S]
    if not fast:  # pytest given no test id runs the whole suite: never that
        sys.exit(f"no fast test in {files}:\n{stdout[-3000:]}")
    # Each mutant runs them all in one process: they must pass so without a mutant too (a test that passes
    # alone and fails beside the others would kill every mutant).
    together = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *fast], cwd=copies[0],
                              capture_output=True, text=True, env=_env())
    if together.returncode != 0:
        sys.exit(f"the fast tests fail together without mutants:\n{together.stdout[-3000:]}")
    return fast


def _env() -> dict[str, str]:
    """No .pyc written: a mutant and its original can share a size and an mtime second (== and !=, 2 and 4),
    and Python would then load the other one's stale bytecode."""
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


def _copy(to: Path) -> Path:
    """A copy of the repository to write mutants into (one per mutant tried at a time)."""
    shutil.copytree(ROOT, to, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".whl*", ".gpu", ".libdw"))
    return to


def _try(m: Mutant, fast: list[str], copy: Path) -> bool:
    """Whether the fast tests kill the mutant, written into the copy (and taken out again)."""
    original = apply(copy, m)
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *fast],
                           cwd=copy, capture_output=True, text=True, timeout=MUTANT_TIMEOUT_S, env=_env())
        return r.returncode != 0
    except subprocess.TimeoutExpired:
        return True
    finally:
        (copy / m.path).write_text(original)


def _try_all(chosen: list[Mutant], fast: list[str], copies: list[Path]) -> list[Mutant]:
    """Each mutant tried in a free copy, as many at a time as there are copies; a line per mutant as it
    ends (numbered in the order drawn); the survivors in that order."""
    free: queue.Queue[Path] = queue.Queue()
    for c in copies:
        free.put(c)
    lock, done = threading.Lock(), [0]

    def one(i: int, m: Mutant) -> bool:
        copy = free.get()
        try:
            killed = _try(m, fast, copy)
        finally:
            free.put(copy)
        with lock:
            done[0] += 1
            print(f"[{i}/{len(chosen)}] {'killed  ' if killed else 'SURVIVED'} {m.where()}"
                  f"{f'  ({done[0]} done)' if len(copies) > 1 else ''}", flush=True)
        return killed

    with ThreadPoolExecutor(max_workers=len(copies)) as pool:
        killed = list(pool.map(one, range(1, len(chosen) + 1), chosen))
    return [m for m, k in zip(chosen, killed, strict=True) if not k]


def test_files(paths: list[str]) -> list[str]:
    """The test files that import a module under paths."""
    names = [p.removesuffix(".py").removesuffix("/__init__").rstrip("/").replace("/", ".") for p in paths]
    return sorted(str(f.relative_to(ROOT)) for f in (ROOT / "tests").glob("test_*.py")
                  if any(n in f.read_text() for n in names))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--paths", nargs="+", default=list(PATHS))
    ap.add_argument("--tests", nargs="+", help="test files (default: those importing the paths)")
    ap.add_argument("--sample", type=int, help="try this many mutants, drawn at random")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--list", action="store_true", help="list the mutants and stop")
    ap.add_argument("--jobs", type=int, default=1, help="mutants tried at a time, each in its own copy (a core each)")
    ap.add_argument("--again", metavar="OUTPUT", help="try only the survivors named in an earlier run's output")
    args = ap.parse_args()
    files = sorted({str(f.relative_to(ROOT)) for p in args.paths  # a folder's modules, or one module named
                    for f in ([ROOT / p] if (ROOT / p).is_file() else (ROOT / p).rglob("*.py"))})
    if not files:
        sys.exit(f"no module under {args.paths}")
    every = [m for f in files for m in mutants(f)]
    if args.again:
        named = set(re.findall(r"^(?:\[\d+/\d+\] SURVIVED |  )(\S+:\d+: .+? -> (?:not in|\S+))(?:  \(\d+ done\))?\s*$",
                               Path(args.again).read_text(), re.M))
        every = [m for m in every if m.where() in named]
    chosen = random.Random(args.seed).sample(every, args.sample) if args.sample and args.sample < len(every) else every
    if args.list:
        print("\n".join(m.where() for m in chosen))
        print(f"{len(chosen)} of {len(every)} mutants")
        return 0
    tests = args.tests or test_files(args.paths)
    with tempfile.TemporaryDirectory(prefix="tuimon-mutants-") as tmp:
        copies = [_copy(Path(tmp) / f"repo{k}") for k in range(max(1, args.jobs))]
        t0 = time.monotonic()
        fast = fast_tests(copies, tests)
        print(f"{len(fast)} fast tests from {len(tests)} files ({time.monotonic() - t0:.0f} s); "
              f"{len(chosen)} of {len(every)} mutants; {len(copies)} at a time", flush=True)
        survived = _try_all(chosen, fast, copies)
    print("\nsurvivors:" if survived else "\nno survivor")
    for m in survived:
        print("  " + m.where())
    score = 1 - len(survived) / len(chosen) if chosen else 1.0
    print(f"score: {len(chosen) - len(survived)}/{len(chosen)} killed = {score:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
