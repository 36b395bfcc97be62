"""The alert webhook never carries its bearer token to a host the config did not name.

Two real HTTP servers on 127.0.0.1: the configured receiver redirects, the other records whatever reaches
it. A redirect that changes host (here: another port, i.e. another origin) or turns the POST into a GET is
refused with the offered location; a 307 to the same origin is followed with the body and token intact.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mlops_config import ConfigError, load_config
from mlops_monitoring import AlertDeliveryError
from mlops_monitoring.webhook import post_json

pytestmark = pytest.mark.integration


def _server(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def servers() -> Iterator[tuple[str, str, list[dict], dict]]:
    """(redirecting receiver URL, elsewhere URL, what reached elsewhere, the receiver's redirect setting)."""
    seen: list[dict] = []
    setting: dict = {}

    class Elsewhere(BaseHTTPRequestHandler):
        def _record(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            seen.append({"method": self.command, "path": self.path, "auth": self.headers.get("Authorization"),
                         "body": self.rfile.read(length).decode() if length else ""})
            self.send_response(200)
            self.end_headers()

        do_GET = do_POST = _record  # noqa: N815 - http.server's handler names

        def log_message(self, *args: object) -> None:
            pass

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode()
            if self.path == "/final":
                seen.append({"method": "POST", "path": "/final", "auth": self.headers.get("Authorization"),
                             "body": body, "host": "receiver"})
                self.send_response(200)
                self.end_headers()
                return
            self.send_response(setting["status"])
            self.send_header("Location", setting["location"])
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    a, a_url = _server(Receiver)
    b, b_url = _server(Elsewhere)
    yield a_url, b_url, seen, setting
    for s in (a, b):
        s.shutdown()
        s.server_close()


@pytest.mark.parametrize("status", [302, 307, 308])
def test_a_redirect_to_another_host_is_refused_and_the_token_stays(servers, status: int,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    receiver, elsewhere, seen, setting = servers
    monkeypatch.setenv("MLOPS_TEST_TOKEN", "s3cret")
    setting.update(status=status, location=f"{elsewhere}/steal")
    with pytest.raises(AlertDeliveryError) as info:
        post_json(f"{receiver}/alerts", [{"labels": {"a": "b"}}], token_env="MLOPS_TEST_TOKEN", timeout_s=5)
    assert f"{elsewhere}/steal" in str(info.value) and f"HTTP {status}" in str(info.value)
    assert info.value.status == status
    assert seen == []  # nothing, and no Authorization header, ever reached the other host


def test_a_same_host_307_is_followed_with_body_and_token(servers, monkeypatch: pytest.MonkeyPatch) -> None:
    receiver, _, seen, setting = servers
    monkeypatch.setenv("MLOPS_TEST_TOKEN", "s3cret")
    setting.update(status=307, location="/final")
    assert post_json(f"{receiver}/alerts", [{"labels": {"a": "b"}}], token_env="MLOPS_TEST_TOKEN", timeout_s=5) == 200
    assert seen == [{"method": "POST", "path": "/final", "auth": "Bearer s3cret", "body": '[{"labels": {"a": "b"}}]',
                     "host": "receiver"}]


def test_a_same_host_302_is_refused_rather_than_turned_into_a_get(servers) -> None:
    receiver, _, seen, setting = servers
    setting.update(status=302, location="/final")
    with pytest.raises(AlertDeliveryError, match="turns the POST into a GET"):
        post_json(f"{receiver}/alerts", {"x": 1}, token_env=None, timeout_s=5)
    assert seen == []


def _production_env() -> dict[str, str]:
    names = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_S3_ENDPOINT_URL", "REDIS_PASSWORD",
             "FEAST_REGISTRY_PASSWORD")
    return {n: "x" for n in names}


def test_production_accepts_only_an_https_alert_url(config_dir: Path) -> None:
    loaded = load_config(config_dir=config_dir, profile="production", environ=_production_env(), check_secrets=False)
    assert loaded.config.monitoring.webhook_url.startswith("https://")
    assert loaded.config.monitoring.webhook_format == "alertmanager"
    bad = "http://alertmanager.monitoring.svc.cluster.local:9093/api/v2/alerts"
    with pytest.raises(ConfigError) as info:
        load_config(config_dir=config_dir, profile="production", environ=_production_env(), check_secrets=False,
                    overrides=[f"monitoring.webhook_url={bad}"])
    assert repr(bad) in str(info.value) and "https://" in str(info.value)
    # the local profile keeps plain http for a receiver on the same machine
    local = load_config(config_dir=config_dir, environ={}, overrides=[f"monitoring.webhook_url={bad}"])
    assert local.config.monitoring.webhook_url == bad

