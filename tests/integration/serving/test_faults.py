"""Faults: a Redis of our own stopped and restarted under a live server; a model that cannot load.

Documented policy (mlops_serving.lookup): ``degraded`` answers 200 with default features and
``degraded: true``; ``unavailable`` answers 503 with Retry-After. Both recover without a restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

from tests.support import RedisServer

pytestmark = pytest.mark.integration

V1 = "/v1/models/fraud:predict"


def until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def default_score(kit: Any, folder: Path, row: dict[str, Any]) -> float:
    enc = kit.small_encoder()
    means = {n["name"]: n["mean"] for n in enc["numeric"]}
    merged = {**row, **{k: means[k] for k in ("user_txn_count_1h", "user_amount_zscore", "merchant_risk")}}
    return float(kit.numpy_score(folder, kit.small_encode(pd.DataFrame([merged]), enc))[0])


def test_redis_outage_degrades_then_recovers(tmp_path: Path, kit: Any, own_redis_server: RedisServer) -> None:
    source = kit.RedisHashFeatures(own_redis_server.url, "f:")
    source.write()
    srv = kit.start_server(kit.make_app(tmp_path, source), tmp_path / "predlog")
    try:
        row = kit.instance(3)
        with httpx.Client(base_url=srv.url, timeout=10) as client:
            normal = client.post(V1, json={"instances": [row]}).json()
            assert normal["degraded"] is False

            own_redis_server.stop()
            started = time.perf_counter()
            r = client.post(V1, json={"instances": [row]})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["degraded"] is True and body["predictions"][0]["degraded"] is True
            assert body["predictions"][0]["score"] == pytest.approx(
                default_score(kit, tmp_path / "models" / "3", row), rel=1e-5)
            assert body["predictions"][0]["score"] != pytest.approx(normal["predictions"][0]["score"], rel=1e-6)
            # while down, requests do not wait on Redis (refused or timed out once, then skipped until retry_s)
            for _ in range(20):
                assert client.post(V1, json={"instances": [row]}).json()["degraded"] is True
            assert time.perf_counter() - started < 10  # 21 requests; a dead Redis is not waited on each time
            ready = client.get("/v2/health/ready")
            assert until(lambda: "unreachable" in (client.get("/v2/health/ready").json()["reason"] or ""))
            assert ready.status_code == 200  # degraded mode stays in rotation
            metrics = client.get("/metrics").text
            assert 'mlops_serving_degraded_predictions_total{model="fraud",variant="stable",version="3"} 21.0' \
                in metrics
            assert 'mlops_serving_feature_store_up{model="fraud"} 0.0' in metrics

            own_redis_server.start()
            source.write()  # the restarted Redis is empty (no persistence): re-materialise
            flags: list[bool] = []

            def recovered() -> bool:
                flags.append(client.post(V1, json={"instances": [row]}).json()["degraded"])
                return not flags[-1]

            assert until(recovered)
            again = client.post(V1, json={"instances": [row]}).json()
            assert again["predictions"][0]["score"] == pytest.approx(normal["predictions"][0]["score"], rel=1e-6)
            assert until(lambda: client.get("/v2/health/ready").json()["reason"] is None)
    finally:
        srv.stop()
    from mlops_serving import read_prediction_log

    frame = read_prediction_log(tmp_path / "predlog", "fraud")
    assert frame["degraded"].sum() == 21 + sum(flags)
    assert (~frame["degraded"]).sum() == 3


def test_redis_outage_unavailable_policy_503_then_recovers(
        tmp_path: Path, kit: Any, own_redis_server: RedisServer) -> None:
    source = kit.RedisHashFeatures(own_redis_server.url, "f:")
    source.write()
    app = kit.make_app(tmp_path, source, tabular={"redis_outage": "unavailable"})
    srv = kit.start_server(app, tmp_path / "predlog")
    try:
        with httpx.Client(base_url=srv.url, timeout=10) as client:
            assert client.post(V1, json={"instances": [kit.instance(1)]}).status_code == 200
            own_redis_server.stop()
            r = client.post(V1, json={"instances": [kit.instance(1)]})
            assert r.status_code == 503
            assert r.headers["retry-after"] == "1"
            assert "unreachable" in r.json()["error"]
            assert until(lambda: client.get("/v2/health/ready").status_code == 503)
            assert client.get("/v2/health/live").status_code == 200
            own_redis_server.start()
            source.write()
            assert until(lambda: client.post(V1, json={"instances": [kit.instance(1)]}).status_code == 200)
            assert until(lambda: client.get("/v2/health/ready").status_code == 200)
    finally:
        srv.stop()


def test_not_ready_until_the_store_is_reachable(tmp_path: Path, kit: Any) -> None:
    port = kit.free_port()
    source = kit.RedisHashFeatures(f"redis://127.0.0.1:{port}/0", "f:")
    srv = kit.start_server(kit.make_app(tmp_path, source), tmp_path / "predlog", wait_ready=False)
    try:
        time.sleep(0.5)
        r = httpx.get(f"{srv.url}/v2/health/ready")
        assert r.status_code == 503
        assert "feature store not reachable" in r.json()["reason"]
        assert httpx.get(f"{srv.url}/v2/health/live").status_code == 200
        late = RedisServer(tmp_path, port)
        late.start()
        try:
            assert until(lambda: httpx.get(f"{srv.url}/v2/health/ready").status_code == 200)
        finally:
            late.stop()
    finally:
        srv.stop()


@pytest.mark.parametrize("breakage", ["missing-weights", "corrupt-weights", "wrong-kind"])
def test_model_that_fails_to_load_leaves_server_up_not_ready(tmp_path: Path, kit: Any, redis_features: Any,
                                                             breakage: str) -> None:
    import json

    from mlops_serving.service import create_app, folder_loader

    folder = kit.export_model(tmp_path / "models" / "7", seed=7)
    if breakage == "missing-weights":
        (folder / "model.safetensors").unlink()
    elif breakage == "corrupt-weights":
        data = bytearray((folder / "model.safetensors").read_bytes())
        data[-1] ^= 0xFF
        (folder / "model.safetensors").write_bytes(bytes(data))
    else:
        meta = json.loads((folder / "model.json").read_text())
        meta["kind"] = "causal_lm"
        (folder / "model.json").write_text(json.dumps(meta))
    app = create_app(kit.serving_config(), model_name="fraud", loader=folder_loader("fraud", folder),
                     source=redis_features, log_dir=tmp_path / "predlog")
    srv = kit.start_server(app, tmp_path / "predlog", wait_ready=False)
    try:
        assert until(lambda: httpx.get(f"{srv.url}/status").json()["model"]["reason"] != "loading")
        ready = httpx.get(f"{srv.url}/v2/health/ready")
        assert ready.status_code == 503
        reason = ready.json()["reason"]
        assert "version '7'" in reason
        assert {"missing-weights": "missing", "corrupt-weights": "safetensors",
                "wrong-kind": "causal_lm"}[breakage] in reason
        assert httpx.get(f"{srv.url}/v2/health/live").status_code == 200
        assert httpx.get(f"{srv.url}/v2/models/fraud/ready").status_code == 503
        r = httpx.post(f"{srv.url}{V1}", json={"instances": [kit.instance(0)]})
        assert r.status_code == 503 and "not ready" in r.json()["error"]
    finally:
        srv.stop()


def test_canary_split_is_exact_and_labelled(tmp_path: Path, kit: Any, redis_features: Any) -> None:
    srv = kit.start_server(kit.make_app(tmp_path, redis_features, canary=True), tmp_path / "predlog")
    try:
        row = kit.instance(2)
        variants, versions, scores = [], [], {}
        with httpx.Client(base_url=srv.url) as client:
            for _ in range(40):
                body = client.post(V1, json={"instances": [row]}).json()
                variants.append(body["variant"])
                versions.append(body["model_version"])
                scores[body["variant"]] = body["predictions"][0]["score"]
            metrics = client.get("/metrics").text
        assert variants.count("canary") == 10  # 25 % of 40, by arithmetic
        assert {v: ver for v, ver in zip(variants, versions, strict=True)} == {"stable": "3", "canary": "4"}
        assert scores["stable"] != scores["canary"]
        merged = {**row, **kit.USERS[row["user_id"]], **kit.MERCHANTS[row["merchant_id"]]}
        x = kit.small_encode(pd.DataFrame([merged]), kit.small_encoder())
        np.testing.assert_allclose(scores["canary"], kit.numpy_score(tmp_path / "models" / "4", x)[0], rtol=1e-5)
        assert 'mlops_serving_requests_total{model="fraud",protocol="v1",variant="canary",version="4"} 10.0' in metrics
        assert 'mlops_serving_requests_total{model="fraud",protocol="v1",variant="stable",version="3"} 30.0' in metrics
    finally:
        srv.stop()
    from mlops_serving import read_prediction_log

    frame = read_prediction_log(tmp_path / "predlog", "fraud")
    assert frame.groupby("variant")["model_version"].agg(set).to_dict() == {"canary": {"4"}, "stable": {"3"}}
    assert (frame["variant"] == "canary").sum() == 10
