"""Serving fixtures: an exported MLP of our own, real Redis feature rows, and a real server on a free port."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
import numpy as np
import pytest

from tests.support import free_port

REPO = Path(__file__).resolve().parents[3]

STORE_FEATURES = ("user_txn_count_1h", "user_amount_zscore", "merchant_risk")
VOCAB = {
    "currency": ["EUR", "USD", "GBP"],
    "category": ["grocery", "travel", "electronics"],
    "country": ["DE", "US", "GB"],
    "device": ["ios", "android", "web_desktop"],
    "channel": ["online", "card_present"],
}
USERS = {f"u{i}": {"user_txn_count_1h": float(i % 5), "user_amount_zscore": (i % 7 - 3) / 2.0} for i in range(20)}
MERCHANTS = {f"m{i}": {"merchant_risk": (i % 4) / 4.0} for i in range(10)}


def small_encoder() -> dict[str, Any]:
    """A small encoder spec in the contract's shape (no log columns, no derived ones), as model.json holds it."""
    numeric = [{"name": "amount", "log": False, "mean": 50.0, "std": 40.0},
               {"name": "user_txn_count_1h", "log": False, "mean": 2.0, "std": 1.5},
               {"name": "user_amount_zscore", "log": False, "mean": 0.0, "std": 1.0},
               {"name": "merchant_risk", "log": False, "mean": 0.4, "std": 0.3}]
    categorical = [{"name": name, "vocab": values} for name, values in VOCAB.items()]
    return {"version": 1, "numeric": numeric, "derived": [], "categorical": categorical,
            "input_dim": len(numeric) + sum(len(v) + 1 for v in VOCAB.values())}


def small_encode(df: Any, encoder: Mapping[str, Any]) -> np.ndarray:
    """Independent of mlops_model: standardise numerics (missing → 0), one-hot categoricals plus an "other" slot."""
    cols = [((df[n["name"]].astype(float) - n["mean"]) / n["std"]).fillna(0.0).to_numpy()
            for n in encoder["numeric"]]
    for cat in encoder["categorical"]:
        cols += [(df[cat["name"]] == v).to_numpy(dtype=float) for v in cat["vocab"]]
        cols.append((~df[cat["name"]].isin(cat["vocab"])).to_numpy(dtype=float))
    return np.stack(cols, axis=1).astype(np.float32)


def export_model(folder: Path, seed: int, hidden: Sequence[int] = (16, 8)) -> Path:
    import torch

    from mlops_model import build_tabular_mlp, save_exported

    encoder = small_encoder()
    arch = {"input_dim": encoder["input_dim"], "hidden_sizes": list(hidden), "dropout": 0.0}
    torch.manual_seed(seed)
    net = build_tabular_mlp(arch)
    return save_exported(folder, net.state_dict(), {
        "kind": "tabular_mlp", "architecture": arch,
        "features": {"feature_service": "fraud_v1", "encoder": encoder},
        "lineage": {"run_id": None, "seed": seed},
    })


def numpy_score(folder: Path, x: np.ndarray) -> np.ndarray:
    """The MLP's forward pass by hand from the safetensors file (independent of torch.nn)."""
    from safetensors.numpy import load_file

    w = load_file(str(folder / "model.safetensors"))
    layers = sorted({int(k.split(".")[0]) for k in w})
    h = x.astype(np.float64)
    for i, idx in enumerate(layers):
        h = h @ w[f"{idx}.weight"].astype(np.float64).T + w[f"{idx}.bias"].astype(np.float64)
        if i < len(layers) - 1:
            h = np.maximum(h, 0.0)
    return 1.0 / (1.0 + np.exp(-h.reshape(-1)))


class RedisHashFeatures:
    """Online features kept as Redis hashes (one per entity) read with one pipeline per request."""

    service_name = "fraud_v1"
    defaults: ClassVar[dict[str, float]] = {}

    def __init__(self, url: str, prefix: str) -> None:
        import redis

        self.prefix = prefix
        self.client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)

    def write(self) -> None:
        pipe = self.client.pipeline()
        for uid, feats in USERS.items():
            pipe.hset(f"{self.prefix}user:{uid}", mapping=feats)
        for mid, feats in MERCHANTS.items():
            pipe.hset(f"{self.prefix}merchant:{mid}", mapping=feats)
        pipe.execute()

    def get(self, entity_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        pipe = self.client.pipeline()
        for row in entity_rows:
            pipe.hgetall(f"{self.prefix}user:{row['user_id']}")
            pipe.hgetall(f"{self.prefix}merchant:{row['merchant_id']}")
        got = pipe.execute()
        out = []
        for i in range(len(entity_rows)):
            user, merchant = got[2 * i], got[2 * i + 1]
            row = {k.decode(): float(v) for k, v in {**user, **merchant}.items()}
            row["_unknown_entity"] = not user or not merchant
            out.append(row)
        return out

    def ping(self) -> bool:
        return bool(self.client.ping())


@dataclass
class Server:
    url: str
    port: int
    app: Any
    log_dir: Path
    thread: threading.Thread
    uv: Any

    def stop(self) -> None:
        self.uv.should_exit = True
        self.thread.join(15)


def start_server(app: Any, log_dir: Path, *, wait_ready: bool = True) -> Server:
    import uvicorn

    port = free_port()
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False,
                                       lifespan="on"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            r = httpx.get(f"{url}/v2/health/ready", timeout=2)
            if not wait_ready or r.status_code == 200:
                break
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    else:
        uv.should_exit = True
        raise RuntimeError(f"server on {url} did not get ready")
    return Server(url, port, app, log_dir, thread, uv)


def settled_readiness(app: Any, log_dir: Path) -> tuple[int, dict[str, Any]]:
    """Start ``app``, wait (30 s at most) until its readiness no longer says it is loading, stop it; the last answer."""
    srv = start_server(app, log_dir, wait_ready=False)
    try:
        deadline = time.monotonic() + 30
        r = httpx.get(f"{srv.url}/v2/health/ready")
        while r.status_code != 200 and "loading" in str(r.json().get("reason")) and time.monotonic() < deadline:
            time.sleep(0.1)
            r = httpx.get(f"{srv.url}/v2/health/ready")
        return r.status_code, r.json()
    finally:
        srv.stop()


def serving_config(**overrides: Any) -> Any:
    from mlops_config import ServingConfig

    return ServingConfig(**{"prediction_log_flush_s": 0.2, **overrides})


def make_app(tmp: Path, source: Any, *, canary: bool = False, **overrides: Any) -> Any:
    from mlops_serving.service import create_app, folder_loader

    stable = export_model(tmp / "models" / "3", seed=3)
    canary_dir = export_model(tmp / "models" / "4", seed=4) if canary else None
    cfg = serving_config(**({"canary_alias": "canary", "canary_percent": 25} if canary else {}), **overrides)
    return create_app(cfg, model_name="fraud", loader=folder_loader("fraud", stable, canary_dir), source=source,
                      log_dir=tmp / "predlog", retry_s=0.3)


def instance(i: int = 0, **over: Any) -> dict[str, Any]:
    row = {"user_id": f"u{i % 20}", "merchant_id": f"m{i % 10}", "amount": 10.0 + i, "currency": "EUR",
           "category": "grocery", "country": "DE", "device": "ios", "channel": "online",
           "transaction_id": f"t{i}"}
    row.update(over)
    return row


@pytest.fixture
def redis_features(redis_url: str, redis_prefix: str) -> RedisHashFeatures:
    source = RedisHashFeatures(redis_url, redis_prefix)
    source.write()
    return source


@pytest.fixture
def server(tmp_path: Path, redis_features: RedisHashFeatures) -> Iterator[Server]:
    srv = start_server(make_app(tmp_path, redis_features), tmp_path / "predlog")
    yield srv
    srv.stop()


@pytest.fixture
def kit() -> Any:
    """The helpers above, for test modules (conftest is not importable under --import-mode=importlib)."""
    from types import SimpleNamespace

    return SimpleNamespace(instance=instance, small_encode=small_encode, small_encoder=small_encoder,
                           numpy_score=numpy_score, export_model=export_model, make_app=make_app,
                           start_server=start_server, settled_readiness=settled_readiness, free_port=free_port,
                           USERS=USERS, MERCHANTS=MERCHANTS,
                           RedisHashFeatures=RedisHashFeatures, serving_config=serving_config)


@pytest.fixture(scope="module")
def base_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Hugging Face causal LM folder (``tests/hf_checkpoint.py``, built here: nothing downloaded), one per
    test module (a module may sign or alter its own)."""
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    try:
        from hf_checkpoint import make_checkpoint
    finally:
        sys.path.pop(0)
    return make_checkpoint(tmp_path_factory.mktemp("lm") / "base")
