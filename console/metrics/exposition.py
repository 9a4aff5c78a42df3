"""The endpoint: Prometheus text format (0.0.4) from a registry, and its HTTP server.

``render_text`` writes what prometheus_client's ``generate_latest`` writes for gauges,
byte for byte (a test holds them equal), but formats each label set once per scrape
(samples sharing one labels dict, as ``ClusterCollector``'s GPU samples do): at 64
hosts x 8 GPUs ``generate_latest`` took ~55-70 ms a scrape, most of it sorting and
escaping the same seven labels ten times per GPU (``bench/metrics.py``). Counters keep
dcgm-exporter's names (``DCGM_FI_DEV_ECC_SBE_VOL_TOTAL``, ``# TYPE ... counter``),
where ``generate_latest`` would append ``_total`` to the TYPE line only.

The server is a ``ThreadingHTTPServer`` on its own daemon thread: a scrape never waits
for the console's event loop, and the event loop never waits for a scrape.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

from console.errors import ConsoleError

GZIP_LEVEL = 1  # a 0.6 MB scrape in ~3 ms; Prometheus asks for gzip


def _escape_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _label_text(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape_value(v)}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}"


def render_text(families: Iterable[Metric]) -> str:
    out: list[str] = []
    # id(labels dict) -> (the dict, its text): holding the dict keeps its id its own
    # while the render lasts, though the family that held it is gone.
    label_texts: dict[int, tuple[dict[str, str], str]] = {}
    for family in families:
        doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        mtype = "untyped" if family.type == "unknown" else family.type
        out.append(f"# HELP {family.name} {doc}\n# TYPE {family.name} {mtype}\n")
        for s in family.samples:
            entry = label_texts.get(id(s.labels))
            if entry is None:
                entry = label_texts[id(s.labels)] = (s.labels, _label_text(s.labels))
            out.append(f"{s.name}{entry[1]} {floatToGoString(s.value)}\n")
    return "".join(out)


def registry_text(registry: CollectorRegistry) -> str:
    return render_text(registry.collect())


class MetricsServer:
    """``GET /metrics`` (and ``/``) answered from ``registry`` on ``address:port``."""

    def __init__(self, registry: CollectorRegistry, address: str, port: int) -> None:
        handler = _handler(registry)
        try:
            self.httpd = ThreadingHTTPServer((address, port), handler)
        except OSError as exc:
            raise ConsoleError(f"cannot listen on {address}:{port}: {exc.strerror}") from exc
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, name="metrics-http", daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    def start(self) -> MetricsServer:
        self.thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def _handler(registry: CollectorRegistry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] not in ("/", "/metrics"):
                self.send_error(404, "only /metrics is served")
                return
            body = registry_text(registry).encode()
            gzipped = "gzip" in self.headers.get("Accept-Encoding", "")
            if gzipped:
                body = gzip.compress(body, GZIP_LEVEL)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_PLAIN_0_0_4)
            if gzipped:
                self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # a scrape every few seconds is not news

    return Handler
