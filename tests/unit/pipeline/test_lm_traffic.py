"""The LM loop's canary traffic alternates between the arms, so two servers on one machine share it alike."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mlops_pipeline.lm_loop import send_prompts
from mlops_pipeline.local_server import Endpoint

ARRIVALS: list[tuple[str, str]] = []
LOCK = threading.Lock()


def _server(arm: str, status: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with LOCK:
                ARRIVALS.append((arm, body["prompt"]))
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@pytest.fixture
def arms(tmp_path: Path) -> Iterator[dict[str, Endpoint]]:
    ARRIVALS.clear()
    httpds = {"stable": _server("stable", 200), "canary": _server("canary", 503)}
    try:
        yield {arm: Endpoint(url=f"http://127.0.0.1:{h.server_address[1]}", model="llm-sft",
                                  log_path=tmp_path / f"{arm}.log") for arm, h in httpds.items()}
    finally:
        for h in httpds.values():
            h.shutdown()
            h.server_close()


def test_one_client_alternates_the_arms_rotating_each_round(arms: dict[str, Endpoint]) -> None:
    prompts = [f"p{i}" for i in range(8)]
    out = send_prompts(arms, prompts, concurrency=1)
    assert out == {"stable": {"requests": 4, "statuses": {200: 4}}, "canary": {"requests": 4, "statuses": {503: 4}}}
    assert ARRIVALS == [("stable", "p0"), ("canary", "p1"), ("canary", "p2"), ("stable", "p3"),
                        ("stable", "p4"), ("canary", "p5"), ("canary", "p6"), ("stable", "p7")]


def test_every_prompt_is_sent_once_with_concurrent_clients(arms: dict[str, Endpoint]) -> None:
    prompts = [f"p{i}" for i in range(41)]  # odd: the last round is short
    out = send_prompts(arms, prompts, concurrency=2)
    assert sorted(p for _, p in ARRIVALS) == sorted(prompts)
    assert out["stable"]["requests"] + out["canary"]["requests"] == 41
    assert abs(out["stable"]["requests"] - out["canary"]["requests"]) == 1
