"""No module of tuimon imports itself back, read statically from the source (the AST of every
import statement).

The rule: the graph of every import among tuimon's modules, at module level and inside
functions alike, has no cycle. A lazy import that closes a circle still means two modules that
each need the other (the probe's hooks reached torch_hooks lazily while torch_hooks imported
hooks for the shared probe): the same knot, only hidden from the import-time error. Lazy imports
stay allowed for what they are for (torch, slow libraries, parts loaded on first use) as long as
they go one way. Not edges: imports under `if TYPE_CHECKING:` (never run), and a package's own
__init__ that Python runs before any of its submodules (every package would be a cycle)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT


def _modules(root: Path, package: str) -> dict[str, Path]:
    """Dotted name -> file, for every .py file of the package."""
    out = {}
    for path in (root / package).rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:` (or typing.TYPE_CHECKING)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def _targets(name: str, path: Path, modules: dict[str, Path]):
    """(module imported, at module level?) for each import that runs; `from X import y` is an
    import of X.y when that is a module, else of X."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    top = {id(n) for n in tree.body}
    skip = _type_checking_only(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, id(node) in top
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                yield (sub if sub in modules else mod), id(node) in top


def import_graph(root: Path, package: str, module_level_only: bool = False):
    """(graph: module -> modules of the package it imports, names under the package that are no
    .py module and no compiled extension beside a .c source)."""
    modules = _modules(root, package)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    unknown = set()
    for name, path in modules.items():
        for target, top in _targets(name, path, modules):
            if module_level_only and not top:
                continue
            if target in modules:
                if target != name:
                    graph[name].add(target)
            elif target.split(".")[0] == package:
                c_source = root.joinpath(*target.split(".")).with_suffix(".c")
                if not c_source.exists():  # (a compiled extension imports no Python module of ours)
                    unknown.add(f"{name} imports {target}")
    return graph, unknown


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_module_of_tuimon_is_in_an_import_cycle():
    graph, unknown = import_graph(ROOT, "tuimon")
    assert unknown == set()
    assert len(graph) > 100  # (every module read)
    assert cycles(graph) == []


def test_the_probe_reaches_its_shared_state_through_one_leaf_module():
    graph, _ = import_graph(ROOT, "tuimon")
    assert graph["tuimon.probe.state"] == set()
    readers = {m for m, targets in graph.items() if "tuimon.probe.state" in targets}
    assert {"tuimon.probe.api", "tuimon.probe.hooks", "tuimon.probe.torch_hooks", "tuimon.probe.comm"} <= readers
    for module in ("comm", "torch_hooks"):  # (they once imported hooks for its module-global probe)
        assert "tuimon.probe.hooks" not in graph[f"tuimon.probe.{module}"]


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / "pkg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_a_cycle_closed_by_a_lazy_import_is_found(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "from .a import f\n",
        "a.py": "from . import b\ndef f():\n    return b\n",
        "b.py": "def g():\n    from .a import f\n    return f\n",
        "c.py": "from .b import g\n",
    })
    graph, unknown = import_graph(root, "pkg")
    assert unknown == set()
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
    assert cycles(import_graph(root, "pkg", module_level_only=True)[0]) == []


def test_a_cycle_through_three_modules_and_a_package_init_is_found(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "sub/__init__.py": "from .x import X\n",
        "sub/x.py": "import pkg.y\nX = 1\n",
        "y.py": "from pkg.z import Z\n",
        "z.py": "from .sub import X as Z\n",
        "t.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .w import W\n",
        "w.py": "from .t import TYPE_CHECKING\n",
    })
    graph, _ = import_graph(root, "pkg")
    assert cycles(graph) == [["pkg.sub", "pkg.sub.x", "pkg.y", "pkg.z"]]  # (t <-> w is type-only)


def test_an_import_of_a_module_that_is_not_there_is_named(tmp_path):
    root = _package(tmp_path, {"__init__.py": "", "a.py": "from .gone import thing\n"})
    assert import_graph(root, "pkg")[1] == {"pkg.a imports pkg.gone"}
