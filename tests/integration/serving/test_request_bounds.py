"""Every request path is bounded, on a real server: a 20 MiB body to any POST route (ours, KServe's :explain
and its repository routes) is refused with 413 before it is read whole, the server stays ready after, and no
OpenAPI document maps the routes for whoever probes them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.integration

MAX_BYTES = 65536
BIG = 20 * 1024 * 1024
POST_ROUTES = ["/v1/models/fraud:predict", "/v1/models/fraud:explain", "/v2/models/fraud/infer",
               "/v2/models/fraud/generate", "/v2/repository/models/fraud/load", "/v2/repository/index",
               "/status", "/not-a-route"]


@pytest.fixture
def server(tmp_path: Path, kit: Any, redis_features: Any) -> Iterator[Any]:
    from mlops_serving.service import create_app, folder_loader

    folder = kit.export_model(tmp_path / "models" / "1", seed=1)
    cfg = kit.serving_config(max_payload_bytes=MAX_BYTES)
    app = create_app(cfg, model_name="fraud", loader=folder_loader("fraud", folder), source=redis_features,
                     log_dir=tmp_path / "predlog")
    srv = kit.start_server(app, tmp_path / "predlog")
    yield srv
    srv.stop()


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_twenty_mib_to_every_post_route_is_refused_and_the_server_stays_ready(server: Any, chunked: bool) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(BIG // 65536):
            yield b"x" * 65536

    got = {}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for route in POST_ROUTES:
            body: Any = chunks() if chunked else b"x" * BIG
            try:
                r = client.post(route, content=body, headers={"content-type": "application/json"})
                got[route] = r.status_code
                assert "Traceback" not in r.text
            except httpx.RemoteProtocolError:  # the server answered and closed while we were still sending
                got[route] = "closed"
        assert client.get("/v2/health/ready").status_code == 200
    # 413 on every route with a Content-Length. A chunked body is cut at the limit where a route reads it (413, or
    # the connection closed once the answer went out); a route that does not exist or take POST answers 404/405
    # without reading it. Never read whole, never a 500.
    reads = {"/v1/models/fraud:predict", "/v1/models/fraud:explain", "/v2/models/fraud/infer"}
    allowed = {r: ({413} if not chunked else {413, "closed"} if r in reads else {413, "closed", 404, 405})
               for r in POST_ROUTES}
    bad = {r: s for r, s in got.items() if s not in allowed[r]}
    assert not bad, f"not refused as too large: {bad}"


def test_no_openapi_document_or_docs(server: Any) -> None:
    for path in ("/openapi.json", "/docs", "/redoc"):
        assert httpx.get(f"{server.url}{path}", timeout=10).status_code == 404, path


@pytest.mark.parametrize("rid", [b"x" * 129, b"a b", "id\u00e9".encode(), b"a,b", b""])
def test_a_request_id_that_is_not_a_bounded_token_is_refused(server: Any, rid: bytes) -> None:
    body = {"instances": [{"user_id": "u1", "merchant_id": "m1", "amount": 10.0, "currency": "EUR",
                           "category": "grocery", "country": "DE", "device": "ios", "channel": "online"}]}
    r = httpx.post(f"{server.url}/v1/models/fraud:predict", json=body,
                   headers=[(b"x-request-id", rid)], timeout=10)
    assert r.status_code == 400 and "X-Request-Id" in r.json()["error"], r.text
    ok = httpx.post(f"{server.url}/v1/models/fraud:predict", json=body,
                    headers={"x-request-id": "3f2a9c1e-7b4d-4e0a-9f1e-2c3d4e5f6a7b"}, timeout=10)
    assert ok.status_code == 200, ok.text


def test_status_in_the_cluster_profiles_tells_nothing_internal(tmp_path: Path, kit: Any, redis_features: Any) -> None:
    from mlops_config import load_config
    from mlops_serving.service import create_app, folder_loader

    for profile in ("staging", "production"):
        cfg = load_config(profile=profile, config_dir=Path(__file__).resolve().parents[3] / "configs",
                          check_secrets=False).config
        assert cfg.serving.status_detail is False, profile
    folder = kit.export_model(tmp_path / "models" / "1", seed=1)
    app = create_app(kit.serving_config(status_detail=False), model_name="fraud",
                     loader=folder_loader("fraud", folder), source=redis_features, log_dir=tmp_path / "predlog")
    srv = kit.start_server(app, tmp_path / "predlog")
    try:
        body = httpx.get(f"{srv.url}/status", timeout=10).json()
    finally:
        srv.stop()
    assert body == {"ready": True, "model": "fraud", "version": body["version"]}, body
