"""Put on PYTHONPATH by `tuimon run`: installs the probe at interpreter start, then hands over to
whichever sitecustomize module the environment had before (so that one still runs)."""

import importlib.machinery
import importlib.util
import os
import sys


def _chain_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _install_probe() -> None:
    root = os.environ.get("TUIMON_PACKAGE_ROOT")
    try:
        import tuimon.probe
    except ImportError:
        if not root:
            return
        sys.path.append(root)  # last, so the job's own packages win
        import tuimon.probe
    tuimon.probe.instrument()


if os.environ.get("TUIMON_PROBE", "1") != "0":
    try:
        _install_probe()
    except Exception as e:  # noqa: BLE001 - never stop the job from starting
        print(f"tuimon: probe not installed: {type(e).__name__}: {e}", file=sys.stderr)
try:
    _chain_next_sitecustomize()
except Exception as e:  # noqa: BLE001
    print(f"tuimon: the environment's own sitecustomize failed: {e}", file=sys.stderr)
