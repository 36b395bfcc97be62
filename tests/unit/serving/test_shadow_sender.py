"""The shadow sender's pick is exact arithmetic; its settings are checked where they are read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from mlops_config import ServingConfig
from mlops_serving import ServingError
from mlops_serving.shadow import ShadowMetrics, ShadowSender


def offer_many(fraction: float, n: int) -> list[bool]:
    # a port nobody listens on: the sender thread fails every call, which the live side never sees
    sender = ShadowSender("fraud", url="127.0.0.1:9", fraction=fraction, queue_size=100_000, timeout_s=0.2,
                          metrics=ShadowMetrics(CollectorRegistry()), log_writer=None)
    try:
        return [sender.offer(request_id=str(i), ts=0.0, live_version="1", live_variant="stable", rows=[{}],
                             features={}, live_scores=[0.5], live_predict_ms=1.0, record_id="transaction_id")
                for i in range(n)]
    finally:
        sender.close(timeout=1.0)


@pytest.mark.parametrize(("fraction", "per_ten"), [(0.3, 3), (0.5, 5), (1.0, 10), (0.0, 0)])
def test_exactly_the_fraction_is_mirrored_spread_evenly(fraction: float, per_ten: int) -> None:
    picked = offer_many(fraction, 1000)
    assert sum(picked) == per_ten * 100
    # request i is mirrored iff floor((i + 1) f) > floor(i f): every run of 10 holds exactly f * 10
    assert all(sum(picked[k : k + 10]) == per_ten for k in range(0, 1000, 10))


@pytest.mark.parametrize(("shadow", "message"), [
    ({"fraction": 0.5}, "shadow.fraction=0.5 needs shadow.url"),
    ({"fraction": 1.5, "url": "h:1"}, "less than or equal to 1"),
    ({"fraction": 0.5, "url": "a b"}, "shadow.url='a b' is not a host[:port]"),
    ({"queue_size": 0}, "greater than or equal to 1"),
    ({"timeout_s": 0}, "greater than 0"),
    ({"fractoin": 0.5}, "Extra inputs are not permitted"),
])
def test_bad_settings_are_named(shadow: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError) as err:
        ServingConfig(tabular={"shadow": shadow})
    assert message in str(err.value)


def test_a_predictor_refuses_to_shadow(tmp_path: Path) -> None:
    from mlops_config import FeaturesConfig, TrackingConfig
    from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
    from mlops_serving import serve

    cfg = ServingConfig(tabular={"role": "predictor", "shadow": {"fraction": 1.0, "url": "candidate:80"}})
    with pytest.raises(ServingError, match="cannot be used with role 'predictor'"):
        serve(cfg, FeaturesConfig(), TrackingConfig(), tmp_path, "fraud", model_dir=tmp_path,
              contract=FRAUD_CONTRACT)


CANDIDATE = {"version": 1, "input_dim": 3 + 1 + 3 + 3,
             "numeric": [{"name": "amount", "log": True, "mean": 2.0, "std": 1.5},
                         {"name": "user_amount_mean_7d", "log": True, "mean": 3.0, "std": 0.8},
                         {"name": "user_txn_count_1h", "log": False, "mean": 1.0, "std": 2.0}],
             "derived": [{"name": "amount_vs_user_mean_7d", "op": "log_ratio",
                          "args": ["amount", "user_amount_mean_7d"], "mean": 0.2, "std": 1.1}],
             "categorical": [{"name": "currency", "vocab": ["EUR", "GBP"]},
                             {"name": "device", "vocab": ["ios", "android"]}]}


@pytest.mark.parametrize("n", [1, 9, 64])
def test_the_candidates_tensor_from_the_columns_is_byte_identical_to_the_merged_rows(n: int) -> None:
    """The sender encodes the mirrored requests from the lookup's columns: the same bytes as encoding each request
    row merged with its features (``{**row, **features}``, what it sent before) with the candidate's encoder. The
    batch holds a feature that overrides a request field (device), one only the request has (currency, missing
    in some rows), None and NaN values, and requests at different offsets of the batch's columns."""
    import math
    import random

    from mlops_model import EncoderSpec
    from mlops_serving.shadow import _Mirrored, mirrored_columns

    rng = random.Random(n)
    spec = EncoderSpec.from_dict(CANDIDATE, source="test")
    total = 3 * n + 2  # three mirrored requests of n rows, at offsets 0, n + 2 and 2n + 2 of the batch
    columns = {
        "_unknown_entity": [rng.random() < 0.3 for _ in range(total)],
        "user_amount_mean_7d": [rng.choice([None, math.nan, rng.uniform(1, 90)]) for _ in range(total)],
        "user_txn_count_1h": [rng.choice([None, 0, rng.randint(1, 9)]) for _ in range(total)],
        "device": [rng.choice(["ios", "android", "web", None]) for _ in range(total)],
    }
    rows = [{"amount": round(rng.uniform(0.5, 900), 2), "device": "ignored",
             **({"currency": rng.choice(["EUR", "GBP", "JPY"])} if rng.random() < 0.7 else {})} for _ in range(total)]
    starts = [0, n + 2, 2 * n + 2]
    items = [_Mirrored(str(k), 0.0, "1", "stable", rows[s : s + n], columns, s, [0.5] * n, 1.0,
                       "transaction_id")
             for k, s in enumerate(starts)]
    merged = [{**row, **{name: values[s + j] for name, values in columns.items()}}
              for s in starts for j, row in enumerate(rows[s : s + n])]
    expected = np.asarray(spec.encode_records(merged), dtype=np.float32)
    got = np.asarray(spec.encode_columns(mirrored_columns(spec.input_columns, items)), dtype=np.float32)
    assert got.shape == (3 * n, CANDIDATE["input_dim"])
    assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("scores", [None, [0.25, 0.5, 0.75]])
def test_the_shadow_log_rows_are_built_by_column_with_every_rows_values(scores: list[float] | None) -> None:
    """A mirrored request's shadow-log rows go to the writer as one block of columns (no dict per row) holding,
    row by row, what the contract's row lists: the instance index, the request's fields, the live score beside the
    candidate's (None when the call failed). Expected rows written out by hand."""
    from datetime import UTC, datetime

    from mlops_serving.log_store import LogColumns
    from mlops_serving.shadow import _log_rows, _Mirrored

    rows = [{"transaction_id": "t1", "amount": 1.0}, {"amount": 2.0}, {"transaction_id": "t3"}]
    item = _Mirrored("req-9", 1_700_000_000.5, "4", "stable", rows, {}, 0, np.array([0.1, 0.2, 0.3]), 2.5,
                     "transaction_id")
    status, error = ("ok", None) if scores else ("timeout", "no answer in 1 s")
    block = _log_rows("fraud", "5", item, scores, status, error, 12.0)
    assert isinstance(block, LogColumns)
    when = datetime(2023, 11, 14, 22, 13, 20, 500000, tzinfo=UTC)
    expected = [{"request_id": "req-9", "instance": k, "ts": when, "model_name": "fraud", "model_version": "5",
                 "live_version": "4", "live_variant": "stable", "transaction_id": tid, "live_score": live,
                 "score": None if scores is None else scores[k], "status": status, "error": error,
                 "latency_ms": 12.0, "live_predict_ms": 2.5}
                for k, (tid, live) in enumerate([("t1", 0.1), (None, 0.2), ("t3", 0.3)])]
    assert block.n == 3
    assert block.columns == LogColumns.of_rows(expected).columns
    assert all(type(v) is float for v in block.columns["live_score"])
