"""One running endpoint: the latest-state source, its collector's registry and the HTTP
server, started together and closed together (``distconsole metrics`` and the console's
``--metrics-listen``)."""

from __future__ import annotations

from prometheus_client.registry import CollectorRegistry

from console.metrics.collector import ClusterCollector
from console.metrics.dcgm import HOSTNAME_LABEL
from console.metrics.exposition import MetricsServer
from console.metrics.source import MetricsSource


class MetricsEndpoint:
    def __init__(self, address: str, port: int, *, hostname_label: str = HOSTNAME_LABEL) -> None:
        """Listens at once (ConsoleError when it cannot); serves from :meth:`start`."""
        self.source = MetricsSource()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ClusterCollector(self.source, hostname_label=hostname_label))
        self.server = MetricsServer(self.registry, address, port)

    @property
    def url(self) -> str:
        address, port = self.server.address
        host = f"[{address}]" if ":" in address else address
        return f"http://{host}:{port}/metrics"

    def start(self) -> MetricsEndpoint:
        self.server.start()
        return self

    def close(self) -> None:
        self.server.close()
