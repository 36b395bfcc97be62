"""Canary analysis against two real local predictors from `mlops_serving` (KServe data plane on uvicorn), with
online features in real Redis: a healthy canary is promoted, a broken one (its scores shifted) rolled back.

The evidence is what the predictors really exposed: their /metrics scraped over HTTP and their prediction
logs (parquet) read back through `mlops_serving.read_prediction_log`.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import httpx
import numpy as np
import pytest

from mlops_config import DeliveryConfig, ServingConfig
from mlops_delivery.canary import analyze_canary_sources

pytestmark = pytest.mark.integration

NUMERIC = ("amount", "user_txn_count_1h", "user_amount_zscore", "merchant_risk")
VOCAB = {"currency": ["EUR", "USD"], "category": ["grocery", "travel"], "country": ["DE", "US"],
         "device": ["ios", "web"], "channel": ["online", "card_present"]}
# Interleaved requests make CPU noise hit both sides alike; latency thresholds are pinned down by the unit tests.
# 150 requests a side pin down the thresholds; the sequential verdict needs more evidence and has its own tests.
CFG = DeliveryConfig(max_p99_ratio=3.0, min_canary_requests=100, sequential={"verdict": "threshold"})
REQUESTS = 150


class RedisFeatures:
    """Online features as Redis hashes, one per entity (what the transformer looks up)."""

    service_name = "fraud_v1"
    defaults: ClassVar[dict[str, float]] = {}

    def __init__(self, url: str, prefix: str) -> None:
        import redis

        self.prefix = prefix
        self.client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
        pipe = self.client.pipeline()
        for i in range(20):
            pipe.hset(f"{prefix}user:u{i}", mapping={"user_txn_count_1h": i % 5, "user_amount_zscore": (i % 7 - 3) / 2})
        for i in range(10):
            pipe.hset(f"{prefix}merchant:m{i}", mapping={"merchant_risk": (i % 4) / 4})
        pipe.execute()

    def get(self, entity_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        pipe = self.client.pipeline()
        for row in entity_rows:
            pipe.hgetall(f"{self.prefix}user:{row['user_id']}")
            pipe.hgetall(f"{self.prefix}merchant:{row['merchant_id']}")
        got = pipe.execute()
        out = []
        for user, merchant in zip(got[::2], got[1::2], strict=True):
            row: dict[str, Any] = {k.decode(): float(v) for k, v in {**user, **merchant}.items()}
            row["_unknown_entity"] = not user or not merchant
            out.append(row)
        return out

    def ping(self) -> bool:
        return bool(self.client.ping())


def export(folder: Path, *, seed: int, bias: float = 0.0) -> Path:
    """An exported fraud MLP (the contract's format); ``bias`` shifts the output logit."""
    import torch

    from mlops_model import build_tabular_mlp, save_exported

    encoder = {"version": 1, "derived": [],
               "numeric": [{"name": n, "log": False, "mean": 1.0, "std": 2.0} for n in NUMERIC],
               "categorical": [{"name": k, "vocab": v} for k, v in VOCAB.items()],
               "input_dim": len(NUMERIC) + sum(len(v) + 1 for v in VOCAB.values())}
    arch = {"input_dim": encoder["input_dim"], "hidden_sizes": [16, 8], "dropout": 0.0}
    torch.manual_seed(seed)
    net = build_tabular_mlp(arch)
    with torch.no_grad():
        net[-1].bias += bias
    return save_exported(folder, net.state_dict(), {
        "kind": "tabular_mlp", "architecture": arch, "features": {"feature_service": "fraud_v1", "encoder": encoder},
        "lineage": {"seed": seed}})


class Predictor:
    """One real predictor: `mlops_serving`'s app for one exported version, on uvicorn, on a free port."""

    def __init__(self, folder: Path, log_dir: Path, source: RedisFeatures) -> None:
        import uvicorn

        from mlops_serving.service import create_app, folder_loader

        app = create_app(ServingConfig(prediction_log_flush_s=0.2), model_name="fraud",
                         loader=folder_loader("fraud", folder), source=source, log_dir=log_dir)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.log_dir = log_dir
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None,
                                                    access_log=False, lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/v2/health/ready", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"predictor on {self.url} did not get ready")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)


@pytest.fixture
def source(redis_url: str, redis_prefix: str) -> RedisFeatures:
    return RedisFeatures(redis_url, redis_prefix)


@pytest.fixture
def stable(tmp_path: Path, source: RedisFeatures) -> Iterator[Predictor]:
    p = Predictor(export(tmp_path / "models" / "1", seed=11), tmp_path / "log", source)
    yield p
    p.stop()


def run_canary(tmp_path: Path, stable: Predictor, canary_folder: Path, source: RedisFeatures) -> Any:
    canary = Predictor(canary_folder, tmp_path / "log", source)
    try:
        with httpx.Client(timeout=10) as client:
            drive(client, stable, canary, np.random.default_rng(5))
        time.sleep(1.0)  # the prediction log flushes every 0.2 s
        assert stable.log_dir == canary.log_dir  # one shared store, as in a cluster
        return analyze_canary_sources(CFG, tmp_path, stable.log_dir, "fraud", f"{stable.url}/metrics",
                                      f"{canary.url}/metrics", stable_version=1, canary_version=2)
    finally:
        canary.stop()


def test_healthy_canary_is_promoted(tmp_path: Path, stable: Predictor, source: RedisFeatures) -> None:
    # same weights as stable under a new version number: nothing should differ but noise
    result = run_canary(tmp_path, stable, export(tmp_path / "models" / "2", seed=11), source)
    assert result.decision == "promote", result.reasons
    assert result.stable.requests == result.canary.requests == REQUESTS
    assert result.stable.logged_predictions == result.canary.logged_predictions == REQUESTS
    assert result.canary.error_rate == 0.0
    assert result.prediction_psi == pytest.approx(0.0, abs=1e-9)


def test_broken_canary_is_rolled_back(tmp_path: Path, stable: Predictor, source: RedisFeatures) -> None:
    # same network with its output logit shifted by +4: every score moves towards "fraud"
    result = run_canary(tmp_path, stable, export(tmp_path / "models" / "2", seed=11, bias=4.0), source)
    assert result.decision == "rollback", result.reasons
    assert result.prediction_psi is not None and result.prediction_psi > CFG.tabular.max_prediction_psi
    assert any(r.startswith("FAILED: prediction PSI") for r in result.reasons)
    assert result.canary.requests == REQUESTS and result.canary.error_rate == 0.0


def drive(client: httpx.Client, stable: Predictor, canary: Predictor, rng: np.random.Generator) -> None:
    """REQUESTS requests to each, alternating, one transaction each."""
    for i in range(REQUESTS):
        row = {"user_id": f"u{i % 20}", "merchant_id": f"m{i % 10}", "amount": float(rng.gamma(2.0, 30.0)),
               "currency": "EUR", "category": ["grocery", "travel"][i % 2], "country": "DE", "device": "ios",
               "channel": "online", "transaction_id": f"t{i}"}
        for target in (stable, canary):
            r = client.post(f"{target.url}/v1/models/fraud:predict", json={"instances": [row]})
            assert r.status_code == 200, r.text
