"""A real HTTP receiver on 127.0.0.1 for the monitor's alert webhook and Pushgateway pushes: it records every
POST (path, ``Authorization`` header, JSON body) and every PUT (path, text body)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Receiver(BaseHTTPRequestHandler):
    received: list[dict] = []  # noqa: RUF012 - replaced per server in alert_receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": json.loads(body)})
        self.send_response(204)
        self.end_headers()

    def do_PUT(self) -> None:  # Pushgateway's API: PUT /metrics/job/<job>/<label>/<value>
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append({"path": self.path, "method": "PUT", "body": body.decode()})
        self.send_response(202)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def alert_receiver() -> Iterator[tuple[str, list[dict]]]:
    """The receiver's ``/alerts`` URL and the list it appends each request to."""
    handler = type("Receiver", (_Receiver,), {"received": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/alerts", handler.received
    finally:
        server.shutdown()
        server.server_close()
