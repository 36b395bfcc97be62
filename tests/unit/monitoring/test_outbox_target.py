"""Queued alerts go to the receiver configured at send time, over https where that is required: a message kept
in the outbox from an earlier run (old URL, maybe http://) must not carry the bearer token to where it was queued."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from mlops_config import MonitoringConfig
from mlops_monitoring.notify import send


class Receiver:
    """A real HTTP server on a free port that records each POST (path, Authorization, body)."""

    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                outer.got.append({"path": self.path, "auth": self.headers.get("Authorization"),
                                  "body": json.loads(body)})
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/v2/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receivers() -> Iterator[tuple[Receiver, Receiver]]:
    old, new = Receiver(), Receiver()
    yield old, new
    old.close()
    new.close()


def _queued(url: str) -> dict[str, Any]:
    return {"url": url, "format": "alertmanager", "kind": "firing", "body": [{"labels": {"model": "fraud"}}],
            "created": "2026-12-01T08:00:00Z", "error": "unreachable"}


def test_a_queued_alert_goes_to_the_current_receiver_with_the_token(receivers: tuple[Receiver, Receiver],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = receivers
    monkeypatch.setenv("AM_TOKEN", "t0ken")
    cfg = MonitoringConfig(webhook_url=new.url, webhook_format="alertmanager", webhook_token_env="AM_TOKEN")
    done, rest = send([_queued(old.url)], cfg)
    assert [d.ok for d in done] == [True] and rest == []
    assert old.got == []  # the URL it was queued with never sees the message nor the token
    assert new.got == [{"path": "/api/v2/alerts", "auth": "Bearer t0ken", "body": [{"labels": {"model": "fraud"}}]}]


def test_https_only_is_checked_at_send_time(receivers: tuple[Receiver, Receiver]) -> None:
    _, new = receivers
    # model_copy skips validation: the https rule of the config's load does not protect this path
    cfg = MonitoringConfig(webhook_format="alertmanager").model_copy(
        update={"webhook_url": new.url, "webhook_https_only": True})
    done, rest = send([_queued(new.url)], cfg)
    assert [d.ok for d in done] == [False] and "not https://" in done[0].detail
    assert new.got == [] and len(rest) == 1  # kept in the outbox, nothing sent
