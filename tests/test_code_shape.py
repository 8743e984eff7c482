"""A shape rule of the source (issue 42): no function in tuimon/ over MAX_LINES lines, but argparse
builders (a function that makes at least ARGPARSE_CALLS add_argument calls: a list of options, read
top to bottom, not logic). A long function is split into parts with names that say what each does."""

import ast

from tests.conftest import ROOT

MAX_LINES = 80
ARGPARSE_CALLS = 10


def argparse_builder(fn: ast.AST) -> bool:
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "add_argument"]
    return len(calls) >= ARGPARSE_CALLS


def long_functions(root) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno is not None:
                lines = n.end_lineno - n.lineno + 1
                if lines > MAX_LINES and not argparse_builder(n):
                    out.append(f"{path.relative_to(root)}:{n.lineno} {n.name} ({lines} lines)")
    return out


def test_no_function_in_tuimon_is_over_80_lines_but_argparse_builders():
    assert long_functions(ROOT / "tuimon") == []


def test_the_rule_sees_a_long_function_and_spares_a_parser(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES - 1))  # (with its def line: MAX_LINES lines)
    options = "\n".join(f"    ap.add_argument('--o{i}')" for i in range(MAX_LINES))
    (tmp_path / "m.py").write_text(f"def fits():\n{body}\n\n\ndef too_long():\n{body}\n    return x0\n\n\n"
                                   f"def parser(ap):\n{options}\n")
    found = long_functions(tmp_path)
    assert [f.split(" ", 1)[1] for f in found] == [f"too_long ({MAX_LINES + 1} lines)"]
