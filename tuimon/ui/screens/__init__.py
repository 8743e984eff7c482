"""The screens (Textual): each shows a View through its panels (ui/panels), one module per screen.

Each is imported when first asked for (`screens.GpuScreen`): the first frame of `attach` or `top`
waits only for its own screen's modules, not the others' (DataTable and their panels)."""

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .captures import CapturesScreen
    from .explain import ExplainScreen
    from .gpu import GpuScreen
    from .help import HelpScreen
    from .hot_lines import HotLinesScreen
    from .main import MainScreen
    from .memory import MemoryScreen
    from .ranges import RangesScreen
    from .stacks import StacksScreen
    from .top import TopScreen

_MODULES = {"CapturesScreen": "captures", "ExplainScreen": "explain", "GpuScreen": "gpu", "HelpScreen": "help",
            "HotLinesScreen": "hot_lines", "MainScreen": "main", "MemoryScreen": "memory", "RangesScreen": "ranges",
            "StacksScreen": "stacks", "TopScreen": "top"}


def __getattr__(name: str) -> type:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_MODULES[name]}", __name__), name)


__all__ = ["CapturesScreen", "ExplainScreen", "GpuScreen", "HelpScreen", "HotLinesScreen", "MainScreen", "MemoryScreen", "RangesScreen",
           "StacksScreen", "TopScreen"]
