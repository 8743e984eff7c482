"""What every screen that shows the monitor's View is: the app hands it each new View (show_view)
and it reads the app as tuimon's own (`tuimon`: typed, not cast)."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual.screen import Screen

from ...monitor.state import View

if TYPE_CHECKING:
    from ..app import TuimonApp


class ViewScreen(Screen):
    """A screen drawn from the View: TuimonApp.redraw calls show_view on the screen on top, if it is one."""

    @property
    def tuimon(self) -> TuimonApp:
        """The app that pushed this screen: always tuimon's (make_app builds it; a screen is never pushed by
        another), typed here once rather than cast in each screen. (No import of ui/app.py at run time: it
        imports the screens.)"""
        return cast("TuimonApp", self.app)

    def show_view(self, view: View, label: str) -> None:
        """Draw view (label: the header's source, e.g. 'PID 123')."""
        raise NotImplementedError
