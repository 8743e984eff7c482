"""Serve the monitor's view to Prometheus: the official client's HTTP server on its own thread, a
collector that turns the newest published view into metric families when scraped. The sampling
is the monitor's (one poll per interval); a scrape never samples, never waits for a sample."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Metric, start_http_server

from ..monitor.state import View
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

    def collect(self) -> list[Metric]:
        view = self.view
        return families(view) if view is not None else []

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

