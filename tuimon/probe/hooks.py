"""Hooks that make existing code visible with no change to it:

- torch: data waits, steps and the step's phases (torch_hooks.py), and
  torch.cuda.nvtx.range_push/range_pop/range;
- nvtx: nvtx.annotate (context manager and decorator), nvtx.push_range / nvtx.pop_range.

Modules imported after instrument() are patched as their import finishes (a meta-path finder,
like wrapt's post-import hooks), so `tuimon run` can install the probe before torch is imported.
Every patch calls the original and keeps its behaviour: results, return values and exceptions.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import state
from .marks import mark

if TYPE_CHECKING:
    from .core import Probe

_patched: set[str] = set()


def install(probe: Probe) -> None:
    """Patch what is imported, and what will be as its import finishes; patched functions report
    to state.probe (api.py sets it first)."""
    for name in _PATCHES:
        if name in sys.modules:
            if name == "torch" and name in _patched:  # patched for an earlier probe: attach this one
                from . import torch_hooks

                torch_hooks.attach(probe, sys.modules["torch"])
            _apply(name, sys.modules[name])
        elif name not in _patched and not any(isinstance(f, _PostImportFinder) for f in sys.meta_path):
            sys.meta_path.insert(0, _PostImportFinder())


def _apply(name: str, module: Any) -> None:
    if name in _patched:
        return
    _patched.add(name)
    try:
        _PATCHES[name](module)
    except Exception as e:  # noqa: BLE001 - a library we do not know must not break the job
        p = state.probe
        if p is not None:
            p.say(f"could not hook {name}: {type(e).__name__}: {e}")


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the real loader of a watched module to patch it once loaded."""

    _busy: set[str] = set()

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: types.ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _PATCHES or fullname in _patched or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(spec.loader, fullname)
        return spec


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        _apply(self._name, module)

    def __getattr__(self, attr: Any) -> Any:  # is_package, get_resource_reader, ...
        return getattr(self._loader, attr)


# -- torch --------------------------------------------------------------------------------------


def _patch_torch(torch: Any) -> None:
    from . import torch_hooks

    torch_hooks.patch(torch)
    import torch.cuda.nvtx

    _patch_torch_nvtx(torch.cuda.nvtx)


def _patch_torch_nvtx(mod: Any) -> None:
    # torch.cuda.nvtx.range() calls the module's range_push/range_pop, so these two cover it.
    orig_push, orig_pop = mod.range_push, mod.range_pop
    if getattr(orig_push, "_tuimon", False):
        return

    @functools.wraps(orig_push)
    def range_push(msg: Any) -> Any:
        p = state.probe
        if p is not None:
            p.push(msg)
        try:
            return orig_push(msg)
        except BaseException:
            if p is not None:
                p.unpush()
            raise

    @functools.wraps(orig_pop)
    def range_pop() -> Any:
        result = orig_pop()
        p = state.probe
        if p is not None:
            p.pop()
        return result

    mark(range_push)
    mark(range_pop)
    mod.range_push, mod.range_pop = range_push, range_pop


# -- nvtx ---------------------------------------------------------------------------------------


def _patch_nvtx(nvtx: Any) -> None:
    impl = sys.modules.get("nvtx.nvtx", nvtx)
    base: Any = nvtx.annotate  # (a class known only at run time: the subclass below is made from it)
    if getattr(base, "_tuimon", False):
        return

    class annotate(base):
        """nvtx.annotate that also reports its range to tuimon."""

        _tuimon = True

        def _name(self, default: str = "") -> Any:
            msg = self.init_args[0] if hasattr(self, "init_args") else None
            return msg if msg is not None else default

        def __enter__(self) -> Any:
            p = state.probe
            if p is not None:
                p.push(self._name())
            return super().__enter__()

        def __exit__(self, *exc: Any) -> Any:
            result = super().__exit__(*exc)
            p = state.probe
            if p is not None:
                p.pop()
            return result

        def __call__(self, func: Any) -> Any:
            inner = super().__call__(func)
            name = self._name(getattr(func, "__name__", "function"))

            @functools.wraps(func)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                p = state.probe
                if p is None:
                    return inner(*args, **kwargs)
                p.push(name)
                try:
                    return inner(*args, **kwargs)
                finally:
                    p.pop()

            return wrapper

    orig_push, orig_pop = nvtx.push_range, nvtx.pop_range

    @functools.wraps(orig_push)
    def push_range(message: str | None = None, *args: Any, **kwargs: Any) -> Any:
        result = orig_push(message, *args, **kwargs)
        p = state.probe
        if p is not None:
            p.push("" if message is None else message)
        return result

    @functools.wraps(orig_pop)
    def pop_range(*args: Any, **kwargs: Any) -> Any:
        result = orig_pop(*args, **kwargs)
        p = state.probe
        if p is not None:
            p.pop()
        return result

    for mod in {nvtx, impl}:
        mod.annotate, mod.push_range, mod.pop_range = annotate, push_range, pop_range


_PATCHES = {"torch": _patch_torch, "nvtx": _patch_nvtx}
