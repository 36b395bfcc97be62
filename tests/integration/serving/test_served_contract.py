"""The served model carries its contract: a real server validates requests, looks features up and encodes by the
contract its ``model.json`` records, not the reference model's.

The model is a hand-built churn export (``tests/support/contracts.CHURN``: one entity ``customer_id``, fields
``tenure_months``, ``monthly_charges``, ``plan``, ``region``) with one store feature kept in real Redis; its
scores are checked against a forward pass by hand (numpy, independent of ``mlops_model``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import httpx
import numpy as np
import pandas as pd
import pytest

from tests.support.contracts import CHURN

CUSTOMERS = {f"c{i}": {"usual_charges": 20.0 + 5.0 * i} for i in range(6)}
VOCAB = {"plan": ["basic", "pro"], "region": ["north", "south"]}


def churn_encoder() -> dict[str, Any]:
    numeric = [{"name": "tenure_months", "log": False, "mean": 24.0, "std": 12.0},
               {"name": "monthly_charges", "log": False, "mean": 50.0, "std": 20.0},
               {"name": "usual_charges", "log": False, "mean": 40.0, "std": 10.0}]
    categorical = [{"name": name, "vocab": values} for name, values in VOCAB.items()]
    return {"version": 1, "numeric": numeric, "derived": [], "categorical": categorical,
            "input_dim": len(numeric) + sum(len(v) + 1 for v in VOCAB.values())}


def export_churn(folder: Path, seed: int, contract: Any = None) -> Path:
    """A tabular export whose ``model.json`` records ``contract`` (CHURN's by default; ``None``: no entry)."""
    import torch

    from mlops_model import build_tabular_mlp, contract_meta, save_exported

    encoder = churn_encoder()
    arch = {"input_dim": encoder["input_dim"], "hidden_sizes": [8], "dropout": 0.0}
    torch.manual_seed(seed)
    meta = {"kind": "tabular_mlp", "architecture": arch,
            "features": {"feature_service": "churn_v1", "encoder": encoder}, "lineage": {"seed": seed},
            "contract": contract_meta(CHURN) if contract is None else contract}
    return save_exported(folder, build_tabular_mlp(arch).state_dict(), meta)


class RedisCustomerFeatures:
    """Churn's online feature (``usual_charges``) as one Redis hash per customer."""

    service_name = "churn_v1"
    defaults: ClassVar[dict[str, float]] = {}

    def __init__(self, url: str, prefix: str) -> None:
        import redis

        self.prefix = prefix
        self.client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
        self.asked: list[dict[str, Any]] = []
        pipe = self.client.pipeline()
        for cid, feats in CUSTOMERS.items():
            pipe.hset(f"{prefix}customer:{cid}", mapping=feats)
        pipe.execute()

    def get(self, entity_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        self.asked += [dict(r) for r in entity_rows]
        pipe = self.client.pipeline()
        for row in entity_rows:
            pipe.hgetall(f"{self.prefix}customer:{row['customer_id']}")
        out = []
        for got in pipe.execute():
            row: dict[str, Any] = {k.decode(): float(v) for k, v in got.items()}
            row["_unknown_entity"] = not got
            out.append(row)
        return out

    def ping(self) -> bool:
        return bool(self.client.ping())


def churn_instance(i: int) -> dict[str, Any]:
    return {"customer_id": f"c{i}", "tenure_months": 3 + i, "monthly_charges": 30.0 + 7.5 * i,
            "plan": VOCAB["plan"][i % 2], "region": "south" if i % 3 else "east", "event_id": f"e{i}"}


def hand_scores(folder: Path, kit: Any, instances: list[dict[str, Any]]) -> np.ndarray:
    frame = pd.DataFrame([{**inst, **CUSTOMERS[inst["customer_id"]]} for inst in instances])
    return kit.numpy_score(folder, kit.small_encode(frame, churn_encoder()))


@pytest.fixture
def churn_server(tmp_path: Path, kit: Any, redis_url: str, redis_prefix: str) -> Iterator[tuple[Any, Path, Any]]:
    from mlops_serving.service import create_app, folder_loader

    folder = export_churn(tmp_path / "models" / "5", seed=5)
    source = RedisCustomerFeatures(redis_url, redis_prefix)
    app = create_app(kit.serving_config(), model_name="churn", loader=folder_loader("churn", folder), source=source,
                     log_dir=tmp_path / "predlog", retry_s=0.3)
    srv = kit.start_server(app, tmp_path / "predlog")
    yield srv, folder, source
    srv.stop()


def test_a_churn_request_is_answered_by_the_churn_contract(churn_server: tuple[Any, Path, Any], kit: Any) -> None:
    srv, folder, source = churn_server
    instances = [churn_instance(i) for i in range(4)]
    r = httpx.post(f"{srv.url}/v1/models/churn:predict", json={"instances": instances}, timeout=10)
    assert r.status_code == 200, r.text
    got = [p["score"] for p in r.json()["predictions"]]
    np.testing.assert_allclose(got, hand_scores(folder, kit, instances), rtol=1e-5, atol=1e-6)
    assert [p["unknown_entity"] for p in r.json()["predictions"]] == [False] * 4
    assert [row["customer_id"] for row in source.asked] == ["c0", "c1", "c2", "c3"]  # looked up by its entity key


def test_a_churn_v2_request_is_answered_and_its_inputs_are_the_contracts(churn_server: tuple[Any, Path, Any],
                                                                         kit: Any) -> None:
    srv, folder, _ = churn_server
    inst = churn_instance(2)
    inputs = [{"name": name, "shape": [1], "datatype": "FP64" if name in CHURN.numeric_fields else "BYTES",
               "data": [inst[name]]} for name in inst]
    r = httpx.post(f"{srv.url}/v2/models/churn/infer", json={"inputs": inputs}, timeout=10)
    assert r.status_code == 200, r.text
    score = next(o for o in r.json()["outputs"] if o["name"] == "score")["data"]
    np.testing.assert_allclose(score, hand_scores(folder, kit, [inst]), rtol=1e-5, atol=1e-6)
    meta = httpx.get(f"{srv.url}/v2/models/churn", timeout=10).json()
    assert [i["name"] for i in meta["inputs"]] == ["customer_id", "tenure_months", "monthly_charges", "plan",
                                                   "region", "event_id"]


def test_a_fraud_shaped_request_is_refused_naming_the_unknown_fields(churn_server: tuple[Any, Path, Any],
                                                                     kit: Any) -> None:
    srv, _, source = churn_server
    r = httpx.post(f"{srv.url}/v1/models/churn:predict", json={"instances": [kit.instance(0)]}, timeout=10)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    for name in ("amount", "merchant_id", "user_id", "transaction_id"):
        assert repr(name) in error
    body = {"inputs": [{"name": "user_id", "shape": [1], "datatype": "BYTES", "data": ["u1"]}]}
    r = httpx.post(f"{srv.url}/v2/models/churn/infer", json=body, timeout=10)
    assert r.status_code == 400 and "unknown input 'user_id'" in r.json()["error"], r.text
    assert source.asked == []  # refused before any lookup


def test_a_model_json_with_a_malformed_contract_is_refused_naming_the_field(tmp_path: Path, kit: Any,
                                                                            redis_url: str, redis_prefix: str) -> None:
    from mlops_serving.service import create_app, folder_loader

    bad = {**CHURN.model_dump(mode="json"), "fields": [["tenure_months", "decimal"]]}
    folder = export_churn(tmp_path / "models" / "6", seed=6, contract=bad)
    app = create_app(kit.serving_config(), model_name="churn", loader=folder_loader("churn", folder),
                     source=RedisCustomerFeatures(redis_url, redis_prefix), log_dir=tmp_path / "predlog")
    status, body = kit.settled_readiness(app, tmp_path / "predlog")
    assert status == 503
    reason = body["reason"]
    assert "invalid contract" in reason and "contract.fields" in reason and "decimal" in reason, reason


def test_the_shadow_log_records_the_contracts_record_id_and_joins_the_prediction_log_on_it(
        tmp_path: Path, kit: Any, redis_url: str, redis_prefix: str) -> None:
    """A churn transformer mirrors every request to a churn candidate (a predictor app of other weights): each
    shadow row carries the request's ``event_id`` under that name (no ``transaction_id`` column), and joined to the
    prediction log on ``event_id`` alone, its live score is the logged one and its candidate score the hand-computed
    forward pass of the candidate's weights."""
    import time

    from mlops_serving import read_prediction_log, read_shadow_log
    from mlops_serving.service import create_app, create_predictor_app, folder_loader

    live_dir = export_churn(tmp_path / "models" / "5", seed=5)
    cand_dir = export_churn(tmp_path / "models" / "6", seed=6)
    cand = kit.start_server(create_predictor_app(kit.serving_config(), model_name="churn",
                                                 loader=lambda: folder_loader("churn", cand_dir)()[0]),
                            tmp_path / "cand")
    log_dir = tmp_path / "predlog"
    app = create_app(kit.serving_config(tabular={"shadow": {"fraction": 1.0, "url": cand.url, "timeout_s": 5.0}}),
                     model_name="churn", loader=folder_loader("churn", live_dir),
                     source=RedisCustomerFeatures(redis_url, redis_prefix), log_dir=log_dir, retry_s=0.3)
    srv = kit.start_server(app, log_dir)
    n = 3
    instances = [churn_instance(i) for i in range(2 * n)]  # every customer in the store once
    try:
        for i in range(n):
            body = {"instances": instances[2 * i : 2 * i + 2]}
            r = httpx.post(f"{srv.url}/v1/models/churn:predict", json=body, headers={"x-request-id": f"req-{i}"},
                           timeout=10)
            assert r.status_code == 200, r.text
        deadline = time.monotonic() + 30
        while len(read_shadow_log(log_dir, "churn")) < 2 * n and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        srv.stop()
        cand.stop()
    shadow = read_shadow_log(log_dir, "churn")
    assert len(shadow) == 2 * n and set(shadow["status"]) == {"ok"}
    assert "transaction_id" not in shadow.columns
    assert sorted(shadow["event_id"]) == sorted(inst["event_id"] for inst in instances)
    live = read_prediction_log(log_dir, "churn")
    joined = shadow.merge(live[["event_id", "score"]], on="event_id", suffixes=("", "_live"), validate="one_to_one")
    assert len(joined) == 2 * n
    np.testing.assert_allclose(joined["live_score"], joined["score_live"], rtol=1e-6)
    by_id = {inst["event_id"]: inst for inst in instances}
    want = hand_scores(cand_dir, kit, [by_id[e] for e in joined["event_id"]])
    np.testing.assert_allclose(joined["score"], want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(joined["score"], joined["live_score"])  # two models: the comparison means something
