"""V1 and V2 (Open Inference Protocol) against a real server: scores, metadata, health, metrics, the log."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.integration


def expected_scores(kit: Any, folder: Path, rows: list[dict[str, Any]]) -> np.ndarray:
    merged = [{**r, **kit.USERS[r["user_id"]], **kit.MERCHANTS[r["merchant_id"]]} for r in rows]
    return kit.numpy_score(folder, kit.small_encode(pd.DataFrame(merged), kit.small_encoder()))


def test_v1_scores_match_a_hand_computed_forward_pass(server: Any, kit: Any, tmp_path: Path) -> None:
    rows = [kit.instance(i) for i in range(5)]
    r = httpx.post(f"{server.url}/v1/models/fraud:predict", json={"instances": rows})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model_version"] == "3"
    assert body["variant"] == "stable"
    got = np.array([p["score"] for p in body["predictions"]])
    np.testing.assert_allclose(got, expected_scores(kit, tmp_path / "models" / "3", rows), rtol=1e-5, atol=1e-6)
    assert [p["degraded"] for p in body["predictions"]] == [False] * 5
    assert [p["unknown_entity"] for p in body["predictions"]] == [False] * 5


def test_unknown_entity_gets_defaults_and_a_flag(server: Any, kit: Any, tmp_path: Path) -> None:
    row = kit.instance(0, user_id="nobody")
    r = httpx.post(f"{server.url}/v1/models/fraud:predict", json={"instances": [row]})
    assert r.status_code == 200, r.text
    pred = r.json()["predictions"][0]
    assert pred["unknown_entity"] is True
    enc = kit.small_encoder()
    means = {n["name"]: n["mean"] for n in enc["numeric"]}
    merged = {**row, "user_txn_count_1h": means["user_txn_count_1h"],
              "user_amount_zscore": means["user_amount_zscore"], **kit.MERCHANTS[row["merchant_id"]]}
    want = kit.numpy_score(tmp_path / "models" / "3", kit.small_encode(pd.DataFrame([merged]), enc))
    assert pred["score"] == pytest.approx(float(want[0]), rel=1e-5)


def test_v2_through_tritonclient(server: Any, kit: Any, tmp_path: Path) -> None:
    import tritonclient.http as triton

    rows = [kit.instance(i) for i in range(4)]
    client = triton.InferenceServerClient(url=f"127.0.0.1:{server.port}")
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("fraud")
    meta = client.get_model_metadata("fraud")
    assert {i["name"] for i in meta["inputs"]} >= {"user_id", "merchant_id", "amount", "currency"}
    assert [o["name"] for o in meta["outputs"]] == ["score", "degraded", "unknown_entity"]
    inputs = []
    for name in ("user_id", "merchant_id", "currency", "category", "country", "device", "channel"):
        inp = triton.InferInput(name, [len(rows)], "BYTES")
        inp.set_data_from_numpy(np.array([r[name].encode() for r in rows], dtype=object))
        inputs.append(inp)
    amount = triton.InferInput("amount", [len(rows)], "FP64")
    amount.set_data_from_numpy(np.array([r["amount"] for r in rows], dtype=np.float64))
    inputs.append(amount)
    result = client.infer("fraud", inputs, outputs=[triton.InferRequestedOutput("score")])
    scores = result.as_numpy("score")
    np.testing.assert_allclose(scores, expected_scores(kit, tmp_path / "models" / "3", rows), rtol=1e-5, atol=1e-6)
    assert result.get_response()["model_version"] == "3"
    # JSON mode of the same protocol (hand-made body) answers the same
    body = {"inputs": [{"name": k, "shape": [len(rows)], "datatype": "FP64" if k == "amount" else "BYTES",
                        "data": [r[k] for r in rows]} for k in rows[0] if k != "transaction_id"]}
    r = httpx.post(f"{server.url}/v2/models/fraud/infer", json=body)
    assert r.status_code == 200, r.text
    out = {o["name"]: o for o in r.json()["outputs"]}
    np.testing.assert_allclose(out["score"]["data"], scores, rtol=1e-6)
    assert out["degraded"]["data"] == [False] * 4


def test_health_metrics_and_prediction_log(server: Any, kit: Any) -> None:
    assert httpx.get(f"{server.url}/").json() == {"status": "alive"}
    assert httpx.get(f"{server.url}/v2/health/live").status_code == 200
    ready = httpx.get(f"{server.url}/v2/health/ready")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    status = httpx.get(f"{server.url}/status").json()
    assert status["model"]["variants"][0]["version"] == "3"
    for i in range(6):
        assert httpx.post(f"{server.url}/v1/models/fraud:predict",
                          json={"instances": [kit.instance(i)]}).status_code == 200
    assert httpx.post(f"{server.url}/v1/models/fraud:predict", content=b"{nope",
                      headers={"content-type": "application/json"}).status_code == 400
    text = httpx.get(f"{server.url}/metrics").text
    assert 'mlops_serving_requests_total{model="fraud",protocol="v1",variant="stable",version="3"} 6.0' in text
    assert 'mlops_serving_feature_lookup_seconds_count{model="fraud",variant="stable",version="3"} 6.0' in text
    assert 'mlops_serving_predict_seconds_count{model="fraud",variant="stable",version="3"} 6.0' in text
    assert 'mlops_serving_score_count{model="fraud",variant="stable",version="3"} 6.0' in text
    assert 'mlops_serving_errors_total{model="fraud",status="400",type="InvalidInput",version="3"} 1.0' in text

    from mlops_serving import read_prediction_log

    deadline = time.monotonic() + 5
    frame = read_prediction_log(server.log_dir, "fraud")
    while len(frame) < 6 and time.monotonic() < deadline:
        time.sleep(0.1)
        frame = read_prediction_log(server.log_dir, "fraud")
    assert len(frame) == 6
    assert sorted(frame["transaction_id"]) == sorted(f"t{i}" for i in range(6))
    assert set(frame["model_version"]) == {"3"} and set(frame["variant"]) == {"stable"}
    assert str(frame["ts"].dt.tz) == "UTC"
    for col in ("request_id", "user_id", "merchant_id", "amount", "currency", "user_txn_count_1h",
                "merchant_risk", "score", "degraded", "latency_ms"):
        assert col in frame.columns
    row = frame[frame["transaction_id"] == "t1"].iloc[0]
    assert row["user_txn_count_1h"] == kit.USERS["u1"]["user_txn_count_1h"]
