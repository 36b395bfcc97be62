"""A local stand-in for GitHub's "create a pull request" endpoint: records what it is sent, answers 201 + html_url.

GitHub cannot be reached from the tests; the git side of a pull-request flow is real (bare remotes), only the
pulls API is this endpoint. The ``github_pulls`` fixture (fixtures.py) points ``GITHUB_API_URL`` at it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextmanager
def pulls_endpoint() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Serve the endpoint on a free loopback port; yields its base URL and the calls it received."""
    calls: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            calls.append({"path": self.path, "auth": self.headers["Authorization"], "body": body})
            payload = json.dumps({"html_url": f"https://github.example/o/r/pull/{len(calls)}"}).encode()
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", calls
    finally:
        server.shutdown()
        thread.join(5)
