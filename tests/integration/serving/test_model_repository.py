"""KServe's model-repository routes (load / unload / index) are not served: nobody who reaches the serving
port can take the model down. Against the real server; on a server that mounts them, an unload makes predict
answer 404 and readiness 503 until the process restarts."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.integration

REPOSITORY_ROUTES = ("/v2/repository/models/fraud/unload", "/v2/repository/models/fraud/load",
                     "/v2/repository/index")


def test_model_repository_routes_are_refused_and_predict_keeps_working(server: Any, kit: Any) -> None:
    body = {"instances": [kit.instance(1)]}
    with httpx.Client(base_url=server.url, timeout=10) as client:
        assert client.post("/v1/models/fraud:predict", json=body).status_code == 200
        for path in REPOSITORY_ROUTES:
            for method in ("POST", "GET"):
                r = client.request(method, path, json={})
                assert r.status_code in (404, 405), f"{method} {path} answered {r.status_code}: {r.text[:200]}"
        assert client.post("/v1/models/fraud:predict", json=body).status_code == 200
        assert client.get("/v2/health/ready").status_code == 200
        assert client.get("/v2/models/fraud/ready").status_code == 200
        assert client.get("/v2/models/fraud").status_code == 200  # metadata stays served
