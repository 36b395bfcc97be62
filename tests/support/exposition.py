"""A metrics registry served over HTTP for a real Prometheus to scrape (the canary tests' stand-in for a server's
``/metrics``), and a wait for what Prometheus has scraped."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def exposition_endpoint(metrics: Any) -> tuple[ThreadingHTTPServer, str]:
    """Serve ``metrics.exposition()`` on a free loopback port; returns the server and its ``host:port``."""

    class Exposition(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = metrics.exposition()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Exposition)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"127.0.0.1:{server.server_address[1]}"


def wait_until(predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Poll ``predicate`` every 0.25 s; fail the test when ``timeout_s`` passes first."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "Prometheus did not get there in time"
        time.sleep(0.25)
