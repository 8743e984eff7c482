"""The layering of docs/DESIGN.md, checked on the source: which package may import which."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PKG = ROOT / "tuimon"
THIRD_PARTY = {"torch", "nvtx", "textual", "rich", "pynvml", "psutil", "plotext", "numpy", "prometheus_client",
               "pyinjector"}

# package -> (tuimon packages it may import, third-party modules it may import at module level)
ALLOWED = {
    "model": (set(), set()),  # typed data only: every layer above may build and read it
    "channel": (set(), set()),
    "probe": ({"channel"}, set()),  # torch/nvtx only inside functions (lazily)
    "analysis": ({"model"}, set()),
    "sources": ({"channel", "model"}, {"pynvml", "psutil"}),
    "capture": ({"channel", "model"}, set()),
    "monitor": ({"channel", "model", "sources", "analysis", "capture"}, set()),
    "export": ({"model", "analysis", "monitor"}, {"prometheus_client"}),  # the view as Prometheus metrics
    "ui": ({"channel", "model", "sources", "analysis", "capture", "monitor", "inject"},  # (inject: `i`, lazily)
           {"textual", "rich", "plotext"}),
    "inject": ({"channel"}, {"pyinjector"}),  # loads the probe into a running process
    "cli": ({"channel", "model", "probe", "sources", "analysis", "capture", "monitor", "ui", "export", "inject"},
            {"textual", "rich", "plotext", "pynvml", "psutil"}),  # everything but torch
    "workloads": ({"probe"}, {"torch"}),  # the bundled training jobs, not the monitor
}


def imports(path: Path):
    """(module imported, at module level?) for every import in a file, resolved to absolute."""
    tree = ast.parse(path.read_text())
    parts = path.relative_to(ROOT).with_suffix("").parts
    package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
    top_level = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, id(node) in top_level
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1])
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module
            yield mod, id(node) in top_level
            if node.level and not node.module:  # from . import x
                for a in node.names:
                    yield f"{mod}.{a.name}", id(node) in top_level


def layer_of(module: str) -> str | None:
    """The tuimon package (layer) a module is in; None for the top-level package and its names
    (`from tuimon import __version__`)."""
    parts = module.split(".")
    if parts[0] != "tuimon" or len(parts) < 2 or not (PKG / parts[1]).is_dir():
        return None
    return parts[1]


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_what_design_allows(layer):
    allowed_internal, allowed_external = ALLOWED[layer]
    bad = []
    for path in sorted((PKG / layer).rglob("*.py")):
        for mod, top in imports(path):
            root = mod.split(".")[0]
            other = layer_of(mod)
            if root == "tuimon" and other not in (None, layer) and other not in allowed_internal:
                if not (other in ("probe", "__init__") and layer in ("cli", "workloads")):
                    bad.append(f"{path.relative_to(ROOT)} imports {mod}")
            if root == "tuimon" and other is None and layer not in ("cli", "workloads"):
                bad.append(f"{path.relative_to(ROOT)} imports the top-level tuimon package")
            if root in THIRD_PARTY and root not in allowed_external and (top or root != "torch" and root != "nvtx"):
                bad.append(f"{path.relative_to(ROOT)} imports {mod}" + ("" if top else " (in a function)"))
    assert bad == []


# ui's text (format.py, plain.py, style.py, panels/): pure functions to Rich Text or str, which
# `--plain` and `--once` share without starting Textual; screens/ and the app show them.
TEXT_ONLY = ("ui/format.py", "ui/plain.py", "ui/style.py", "ui/panels")


@pytest.mark.parametrize("part", TEXT_ONLY)
def test_the_ui_text_never_imports_textual(part):
    paths = [PKG / part] if part.endswith(".py") else sorted((PKG / part).rglob("*.py"))
    bad = [f"{path.relative_to(ROOT)} imports {mod}" for path in paths for mod, _ in imports(path)
           if mod.split(".")[0] == "textual" or mod.startswith(("tuimon.ui.screens", "tuimon.ui.app", "tuimon.ui.widgets"))]
    assert paths and bad == []


def test_every_package_has_a_rule():
    packages = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= set(ALLOWED), packages - set(ALLOWED)


def test_the_monitor_never_imports_torch():
    code = ("import sys, tuimon.cli.main, tuimon.monitor.session, tuimon.sources.nvml, tuimon.ui.app; "
            # (each command's module: cli.main imports them only when one runs)
            "import tuimon.cli.attach, tuimon.cli.run, tuimon.cli.record, tuimon.cli.trace, tuimon.cli.export, "
            "tuimon.cli.baseline, tuimon.cli.doctor, tuimon.cli.capture; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'nvtx')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_psutil_loads_at_the_first_process_sample_not_before_the_first_frame():
    """psutil's import (15-30 ms) is paid on the sampler's thread at its first sample, while the UI
    loads, not by the monitor's modules before the first frame; the probe (inside the job) never loads it."""
    code = ("import os, sys, tuimon.cli.main, tuimon.cli.attach, tuimon.cli.run, tuimon.monitor.session, "
            "tuimon.ui.app, tuimon.probe.api, tuimon.probe.core; print('psutil' in sys.modules); "
            "from tuimon.sources.process import ProcessSampler; s = ProcessSampler(os.getpid()); "
            "print('psutil' in sys.modules); s.sample(); print('psutil' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "True"]


def test_the_monitor_leaves_openssl_unloaded_and_ssl_importable():
    """asyncio imports ssl for TLS the monitor never opens (~4 MB resident, issue 27's RSS budget):
    the monitor's commands load without it, and a later `import ssl` in the process still works."""
    code = ("import sys, tuimon.cli.main, tuimon.cli.attach, tuimon.cli.run, tuimon.ui.app, textual.app; "
            "print('ssl' in sys.modules, '_ssl' in sys.modules); import ssl; print(ssl.PROTOCOL_TLS_CLIENT.name)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "PROTOCOL_TLS_CLIENT"]


def test_the_other_screens_load_when_first_shown():
    """The first frame waits for the main screen's modules only: the others (and Textual's
    DataTable) load when a key first shows them."""
    code = ("import sys, tuimon.cli.attach, tuimon.ui.app; from tuimon.ui import screens; screens.MainScreen; "
            "late = ('tuimon.ui.screens.captures', 'tuimon.ui.screens.explain', 'textual.widgets._data_table'); "
            "print([m in sys.modules for m in late]); screens.CapturesScreen, screens.ExplainScreen; "
            "print([m in sys.modules for m in late])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["[False, False, False]", "[True, True, True]"]


def test_analysis_kinds_match_the_layout():
    from tuimon.analysis import steps
    from tuimon.channel import layout

    assert (steps.RANGE, steps.STEP, steps.DATA_WAIT, steps.COUNT, steps.PHASE, steps.STEP_VALUE, steps.GAUGE,
            steps.SITE, steps.HOT) == layout.KINDS
    names = ["kind", "depth", "flags", "name", "tid", "step", "t0", "t1", "value", "seq"]
    assert [steps.F_KIND, steps.F_DEPTH, steps.F_NAME, steps.F_TID, steps.F_STEP, steps.F_T0, steps.F_T1,
            steps.F_VALUE] == [names.index(n) for n in ("kind", "depth", "name", "tid", "step", "t0", "t1", "value")]
    assert len(layout.RECORD.unpack(bytes(layout.RECORD_SIZE))) == len(names)
    # the C reader knows the same kinds (it keeps 1..KIND_MAX), and the C phase clock writes the same ones
    c_source = (ROOT / "tuimon" / "channel" / "_fastring.h").read_text()
    assert f"#define KIND_MAX {max(layout.KINDS)} " in c_source and layout.KINDS == tuple(range(1, max(layout.KINDS) + 1))
    for name in ("RANGE", "STEP", "DATA_WAIT", "COUNT", "PHASE", "STEP_VALUE"):
        assert f"#define KIND_{name} {getattr(layout, name)}\n" in c_source, name
