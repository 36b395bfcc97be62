"""The demo's traffic client repeats what the server did not take (408, 503 + Retry-After) and counts the rest.

The add-a-feature run once counted 2 of 1,000 shadow requests as 408 on a loaded CI machine: the client's thread was
starved between writing the headers and the body, past the server's 250 ms deadline, and the status counted as if
the model had failed them. The server here answers each request's first try with the status under test (a 408 also
closes the connection, as mlops_serving's admission does) and every later try with 200.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from mlops_pipeline.local_server import SHED_RETRIES, Endpoint, post_retrying, send_traffic

TRIES: Counter[str] = Counter()
LOCK = threading.Lock()
FIRST: dict[str, int] = {}  # record id -> the status its first try gets (absent: 200)
ALWAYS: dict[str, int] = {}  # record id -> the status every try gets


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        rid = body["instances"][0]["id"] if "instances" in body else body["prompt"]
        with LOCK:
            TRIES[rid] += 1
            first = TRIES[rid] == 1
        status = ALWAYS.get(rid) or (FIRST.get(rid, 200) if first else 200)
        payload = json.dumps({"predictions": [0.5]}).encode()
        self.send_response(status)
        if status == 503:
            self.send_header("Retry-After", "0")
        if status == 408:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Endpoint]:
    TRIES.clear()
    FIRST.clear()
    ALWAYS.clear()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield Endpoint(url=f"http://127.0.0.1:{httpd.server_address[1]}", model="fraud", log_path=tmp_path / "s.log")
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_late_bodies_and_shed_requests_are_repeated_and_count_their_final_status(server: Endpoint) -> None:
    rows = [{"id": f"r{i}"} for i in range(20)]
    FIRST.update({"r3": 408, "r4": 408, "r11": 503})
    ALWAYS.update({"r7": 500, "r9": 400})  # the model's or the request's failure: counted at once, never repeated
    out = send_traffic(server, rows, concurrency=3)
    assert out["requests"] == 20
    assert out["statuses"] == {200: 18, 500: 1, 400: 1}
    assert out["retries"] == {408: 2, 503: 1} and out["shed_retries"] == 1
    assert TRIES["r3"] == TRIES["r4"] == TRIES["r11"] == 2
    assert TRIES["r7"] == TRIES["r9"] == 1
    assert sum(TRIES.values()) == 23  # 20 requests, 3 repeats


def test_a_request_late_on_every_try_counts_as_late_after_the_bounded_retries(server: Endpoint) -> None:
    ALWAYS["slow"] = 408
    with httpx.Client(timeout=10) as client:
        resp, retried = post_retrying(client, f"{server.url}/v1/models/fraud:predict",
                                      json.dumps({"instances": [{"id": "slow"}]}))
    assert resp.status_code == 408
    assert retried == {408: SHED_RETRIES}
    assert TRIES["slow"] == SHED_RETRIES + 1
