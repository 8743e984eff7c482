"""The screens (Textual): each shows a View through its panels (ui/panels), one module per screen."""

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

__all__ = ["CapturesScreen", "ExplainScreen", "GpuScreen", "HelpScreen", "HotLinesScreen", "MainScreen", "MemoryScreen", "RangesScreen",
           "StacksScreen", "TopScreen"]
