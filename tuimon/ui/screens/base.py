"""What every screen that shows the monitor's View is: the app hands it each new View (show_view)
and it reads the app as tuimon's own (`tuimon`: typed, not cast)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.screen import Screen

from ...monitor.state import View

if TYPE_CHECKING:
    from ..app import TuimonApp


class ViewScreen(Screen):
    """A screen drawn from the View: TuimonApp.redraw calls show_view on the screen on top, if it is one."""

    @property
    def tuimon(self) -> TuimonApp:
        """The app that pushed this screen (always tuimon's), typed."""
        from ..app import TuimonApp  # (app.py imports the screens)

        app = self.app
        if not isinstance(app, TuimonApp):
            raise TypeError(f"{type(self).__name__} is shown only by TuimonApp, not {type(app).__name__}")
        return app

    def show_view(self, view: View, label: str) -> None:
        """Draw view (label: the header's source, e.g. 'PID 123')."""
        raise NotImplementedError
