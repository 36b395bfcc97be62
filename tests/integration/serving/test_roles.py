"""The two halves of an InferenceService on loopback: a predictor (model only) and a transformer in front of it.

The transformer reads the predictor's served version and encoder, looks features up in real Redis, encodes,
and sends one V2 tensor per batch; it starts before the predictor and becomes ready when the predictor is.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.integration

V1 = "/v1/models/fraud:predict"


def until(predicate: Any, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_transformer_in_front_of_predictor(tmp_path: Path, kit: Any, redis_features: Any) -> None:
    from mlops_serving.remote import remote_loader
    from mlops_serving.served import ModelRef, load_model
    from mlops_serving.service import create_app, create_predictor_app

    folder = kit.export_model(tmp_path / "models" / "12", seed=12)
    cfg = kit.serving_config(tabular={"role": "transformer"})
    predictor_port = kit.free_port()
    transformer = create_app(cfg, model_name="fraud", loader=remote_loader(f"127.0.0.1:{predictor_port}", "fraud"),
                             source=redis_features, log_dir=tmp_path / "predlog")
    t_srv = kit.start_server(transformer, tmp_path / "predlog", wait_ready=False)
    p_srv = None
    try:
        # the load thread tries the predictor in the background: until its first try fails the reason is "loading"
        deadline = time.monotonic() + 30
        not_ready = httpx.get(f"{t_srv.url}/v2/health/ready")
        while "loading" in not_ready.json()["reason"] and time.monotonic() < deadline:
            time.sleep(0.2)
            not_ready = httpx.get(f"{t_srv.url}/v2/health/ready")
        assert not_ready.status_code == 503 and "unreachable" in not_ready.json()["reason"]

        import uvicorn  # the predictor on the port the transformer was told about

        predictor = create_predictor_app(kit.serving_config(tabular={"role": "predictor"}), model_name="fraud",
                                         loader=lambda: load_model(ModelRef("fraud", "12", folder)))
        p_srv = _serve_on(predictor, predictor_port, uvicorn)
        assert until(lambda: httpx.get(f"{t_srv.url}/v2/health/ready").status_code == 200, 30)

        rows = [kit.instance(i) for i in range(6)]
        r = httpx.post(f"{t_srv.url}{V1}", json={"instances": rows})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["model_version"] == "12"
        merged = [{**row, **kit.USERS[row["user_id"]], **kit.MERCHANTS[row["merchant_id"]]} for row in rows]
        want = kit.numpy_score(folder, kit.small_encode(pd.DataFrame(merged), kit.small_encoder()))
        np.testing.assert_allclose([p["score"] for p in body["predictions"]], want, rtol=1e-5, atol=1e-6)

        p_url = f"http://127.0.0.1:{predictor_port}"
        meta = httpx.get(f"{p_url}/mlops/models/fraud/meta").json()
        assert meta["served_version"] == "12" and "encoder" in meta["features"]
        bad = httpx.post(f"{p_url}/v2/models/fraud/infer", json={"inputs": [
            {"name": "input", "shape": [1, 3], "datatype": "FP32", "data": [1.0, 2.0, 3.0]}]})
        assert bad.status_code == 400 and "expected [n, 23]" in bad.json()["error"]
        assert 'mlops_serving_requests_total{model="fraud",protocol="v2",variant="stable",version="12"} 1.0' in \
            httpx.get(f"{p_url}/metrics").text

        p_srv.should_exit = True
        assert until(lambda: not _up(predictor_port), 20)
        down = httpx.post(f"{t_srv.url}{V1}", json={"instances": rows[:1]})
        assert down.status_code == 503 and "predictor" in down.json()["error"]
    finally:
        if p_srv is not None:
            p_srv.should_exit = True
        t_srv.stop()


def _serve_on(app: Any, port: int, uvicorn: Any) -> Any:
    import threading

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False))
    threading.Thread(target=server.run, daemon=True).start()
    assert until(lambda: _up(port), 20)
    return server


def _up(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/v2/health/ready").status_code == 200
    except httpx.TransportError:
        return False


def test_kserve_injected_arguments_are_understood() -> None:
    from typer.testing import CliRunner

    from mlops_cli.app import app

    runner = CliRunner()
    result = runner.invoke(app, ["serve", "--model_name", "other", "--predictor_host", "p:80", "--http_port", "8080"])
    assert result.exit_code == 2 and "--model_name 'other'" in result.output
    result = runner.invoke(app, ["serve", "--predictor_protocol", "v1"])
    assert result.exit_code == 2 and "'v1' is not supported" in result.output
    result = runner.invoke(app, ["serve", "--role", "transformer"])
    assert result.exit_code == 2 and "predictor_host" in result.output
