"""Serve the monitor's view to Prometheus: the official client's HTTP server on its own thread, a
collector that turns the newest published view into metric families when scraped. The sampling
is the monitor's (one poll per interval); a scrape never samples, never waits for a sample."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, start_http_server

from ..monitor.state import MonitorState, View
from .metrics import families


class Exporter:
    def __init__(self, port: int, addr: str = "127.0.0.1"):
        self.view: View | None = None  # replaced whole by publish(): a scrape reads one view
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self.server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        self.port = self.server.server_address[1]

    def publish(self, view: View) -> None:
        self.view = view

    def collect(self):
        view = self.view
        return families(view) if view is not None else []

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class ExportingSession:
    """A session whose every cycle is also published to an Exporter (for `tuimon run
    --metrics-port`: the TUI or the plain view polls it as it polls any session)."""

    def __init__(self, session, exporter: Exporter, baseline=None):
        self._session, self._exporter, self._state = session, exporter, MonitorState(baseline=baseline)

    def poll(self):
        cycle = self._session.poll()
        self._state.apply(cycle)
        self._exporter.publish(self._state.view())
        return cycle

    def stop(self) -> None:
        try:
            self._session.stop()
        finally:
            self._exporter.close()

    def __getattr__(self, name):  # everything else is the session's
        return getattr(self._session, name)
