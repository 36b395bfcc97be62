"""End to end on real components: Feast on a Redis of our own, a version registered in MLflow (SQLite) with
alias ``champion``, and ``mlops serve`` as a subprocess answering V1 and V2 (tritonclient), surviving a
Redis outage, filling /metrics and the prediction log."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from tests.support import RedisServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
V1 = "/v1/models/fraud:predict"
FIELDS = ("user_id", "merchant_id", "amount", "currency", "category", "country", "device", "channel")


def until(predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    return False


@pytest.fixture
def world(config_dir: Path, kit: Any) -> Iterator[dict[str, Any]]:
    """Prepared features on Redis, an exported model registered as fraud@champion, config overrides."""
    import mlflow
    import torch
    from mlflow.tracking import MlflowClient

    from mlops_config import DataConfig, load_config
    from mlops_features import prepare_local_data, training_set
    from mlops_model import EncoderSpec, build_tabular_mlp, model_signer, save_exported

    root = config_dir.parent
    redis = RedisServer(root, kit.free_port(), appendonly=True)
    redis.start()
    shutil.copytree(REPO / "feature_repo", root / "feature_repo", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    sets = ["features.repo_path=feature_repo", "features.online_store=redis",
            f"features.redis_url=redis://127.0.0.1:{redis.port}/0", "serving.prediction_log_flush_s=0.3",
            "serving.tabular.feature_retry_s=0.3"]
    cfg = load_config(config_dir=config_dir, overrides=sets).config
    data = DataConfig(rows=3000, days=3, users=150, merchants=40)
    prepare_local_data(data, cfg.features, root, contract=FRAUD_CONTRACT, seed=5)
    df = training_set(cfg.features, data, root, contract=FRAUD_CONTRACT)
    encoder = EncoderSpec.fit(df, contract=FRAUD_CONTRACT)
    arch = {"input_dim": encoder.input_dim, "hidden_sizes": [16], "dropout": 0.0}
    torch.manual_seed(5)
    folder = save_exported(root / "export", build_tabular_mlp(arch).state_dict(), {
        "kind": "tabular_mlp", "architecture": arch, "lineage": {"seed": 5},
        "features": {"feature_service": cfg.features.feature_service, "encoder": encoder.to_dict()}},
        sign=model_signer(cfg.provenance, root))  # as training signs; the server verifies with the same local pair
    uri = f"sqlite:///{root / '.mlops' / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    exp = MlflowClient().create_experiment("fraud-detection", artifact_location=(root / "mlartifacts").as_uri())
    with mlflow.start_run(experiment_id=exp) as run:
        mlflow.log_artifacts(str(folder), "model")
    client = MlflowClient()
    client.create_registered_model("fraud")
    version = client.create_model_version("fraud", f"{run.info.artifact_uri}/model", run_id=run.info.run_id)
    client.set_registered_model_alias("fraud", "champion", version.version)
    yield {"root": root, "redis": redis, "sets": sets, "cfg": cfg, "data": data, "df": df, "rows": df.head(40),
           "folder": folder, "encoder": encoder, "version": str(version.version)}
    redis.stop()


def test_mlops_serve_end_to_end(world: dict[str, Any], kit: Any) -> None:
    import tritonclient.http as triton

    from mlops_features import OnlineFeatures
    from mlops_serving import read_prediction_log

    root, port = world["root"], kit.free_port()
    cmd = [str(Path(sys.executable).with_name("mlops")), "serve", "--model", "fraud", "--alias", "champion",
           "--port", str(port)]
    for s in world["sets"]:
        cmd += ["--set", s]
    env = {**os.environ, "MLOPS_CONFIG_DIR": str(root / "configs")}
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        assert until(lambda: httpx.get(f"{url}/v2/health/ready").status_code == 200, 90), _tail(proc, url)
        rows = [{k: (float(r[k]) if k == "amount" else str(r[k])) for k in FIELDS} for _, r in
                world["rows"].head(8).iterrows()]
        r = httpx.post(f"{url}{V1}", json={"instances": rows})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["model_version"] == world["version"] and body["degraded"] is False
        # independent expectation: features from a separate OnlineFeatures, the frame encoder (byte-identical
        # to the records one: tests/unit/model) and a numpy forward pass over the registered safetensors
        store = OnlineFeatures(world["cfg"].features, root, contract=FRAUD_CONTRACT).get(rows)
        frame = pd.DataFrame([{**row, **{k: v for k, v in f.items() if not k.startswith(("_", "unknown_"))}}
                              for row, f in zip(rows, store, strict=True)])
        want = kit.numpy_score(world["folder"], world["encoder"].encode_frame(frame))
        np.testing.assert_allclose([p["score"] for p in body["predictions"]], want, rtol=1e-5, atol=1e-6)

        client = triton.InferenceServerClient(url=f"127.0.0.1:{port}")
        inputs = []
        for name in FIELDS:
            if name == "amount":
                inp = triton.InferInput(name, [len(rows)], "FP64")
                inp.set_data_from_numpy(np.array([r[name] for r in rows], dtype=np.float64))
            else:
                inp = triton.InferInput(name, [len(rows)], "BYTES")
                inp.set_data_from_numpy(np.array([r[name].encode() for r in rows], dtype=object))
            inputs.append(inp)
        result = client.infer("fraud", inputs)
        np.testing.assert_allclose(result.as_numpy("score"), want, rtol=1e-5, atol=1e-6)

        world["redis"].stop()
        degraded = httpx.post(f"{url}{V1}", json={"instances": rows[:1]}, timeout=10)
        assert degraded.status_code == 200 and degraded.json()["degraded"] is True
        world["redis"].start()
        assert until(lambda: httpx.post(f"{url}{V1}", json={"instances": rows[:1]}).json()["degraded"] is False)
        metrics = httpx.get(f"{url}/metrics").text
        info = f'alias="champion",model="fraud",variant="stable",version="{world["version"]}"'
        assert f"mlops_serving_model_info{{{info}}} 1.0" in metrics
        assert "mlops_serving_degraded_predictions_total" in metrics
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert f"serving fraud@champion = version {world['version']}" in err
    log = read_prediction_log(root / world["cfg"].serving.prediction_log_uri, "fraud")
    assert len(log) >= 8 + 1 + 1
    assert set(log["model_version"]) == {world["version"]}
    assert log["degraded"].any() and (~log["degraded"]).any()
    assert {"user_txn_count_1h", "user_amount_zscore", "merchant_fraud_rate_7d"} <= set(log.columns)


def _tail(proc: subprocess.Popen[str], url: str) -> str:
    if proc.poll() is None:
        try:
            return f"server not ready in time: {httpx.get(f'{url}/status').text[:2000]}"
        except httpx.TransportError as exc:
            return f"server not ready in time, not answering: {exc}"
    return (proc.stderr.read() if proc.stderr else "")[-3000:]


def test_serving_and_the_gates_score_the_holdout_byte_identically(world: dict[str, Any], tmp_path: Path) -> None:
    """The evaluation gates' scorer (the registered version from MLflow, the holdout as a frame) and serving's
    loader (the same version, the holdout as request records) go through the one ExportedModel: same bytes."""
    from mlflow.tracking import MlflowClient

    from mlops_evaluation.holdout import load_holdout
    from mlops_evaluation.scorer import load_version
    from mlops_serving.service import folder_loader

    cfg = world["cfg"]
    holdout = load_holdout(cfg.features, world["data"], world["root"], cfg.evaluation.tabular.holdout_fraction,
                           contract=FRAUD_CONTRACT)
    gate = load_version(MlflowClient(), "fraud", world["version"], tmp_path / "gate")
    served, _ = folder_loader("fraud", gate.folder, version=world["version"])()
    records = holdout.frame.to_dict("records")
    gate_scores = gate.score(holdout.frame)
    served_scores = served.score_records(records)
    assert len(gate_scores) == len(holdout.frame) > 100
    assert gate_scores.dtype == served_scores.dtype == np.float64
    assert gate_scores.tobytes() == served_scores.tobytes()
    assert served.weights_sha256 == gate.meta["weights_sha256"]
