"""``EncoderSpec.encode_columns`` (serving's hot path): byte-identical to ``encode_frame`` on the fraud model's own
encoder shape (log-scaled amounts, the derived ratio, the five request categoricals, the store's windows) for
known and unknown entities, None / NaN, unseen categories, at several batch sizes; hand arithmetic; bad input."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from mlops_model import EncoderSpec, EncoderSpecError

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> tuple[EncoderSpec, pd.DataFrame]:
    """The spec ``EncoderSpec.fit`` gives on sample transactions joined to the repo's own window features (what
    the train stage fits), and rows of the same columns to encode."""
    from mlops_features import generate_transactions

    spec_file = importlib.util.spec_from_file_location("fraud_windows_for_columns", ROOT / "feature_repo/windows.py")
    assert spec_file is not None and spec_file.loader is not None
    windows = importlib.util.module_from_spec(spec_file)
    spec_file.loader.exec_module(windows)
    paths = generate_transactions(tmp_path_factory.mktemp("tx"), rows=1500, days=2, seed=5, users=80, merchants=20)
    tx = pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)
    users = windows.user_windows_udf(tx).drop(columns=["created"])
    merchants = windows.merchant_risk_udf(tx).drop(columns=["created", "event_timestamp"])
    df = tx.merge(users, on=["user_id", "event_timestamp"], how="left")
    df = df.merge(merchants.groupby("merchant_id").last().reset_index(), on="merchant_id", how="left")
    spec = EncoderSpec.fit(df.iloc[:1000], contract=FRAUD_CONTRACT)
    return spec, df.iloc[1000:].reset_index(drop=True)


def _columns(rows: pd.DataFrame, spec: EncoderSpec) -> dict[str, list[Any]]:
    """The rows as the lookup and the request give them: plain Python values per column, None where absent."""
    out = {}
    for name in spec.input_columns:
        values = rows[name].astype(object).tolist()
        out[name] = [None if v is None or (isinstance(v, float) and v != v) else v for v in values]
    return out


def _perturb(columns: dict[str, list[Any]], spec: EncoderSpec) -> None:
    """Unknown entities (every store feature None), NaN and None values, unseen and missing categories, a zero
    and a negative amount (the log scale's sign branch), each on some rows."""
    n = len(columns["amount"])
    stored = [c.name for c in spec.numeric if c.name != "amount"]
    for i in range(n):
        if i % 5 == 1:  # an unknown user and merchant: the store has nothing
            for name in stored:
                columns[name][i] = None
        if i % 7 == 2:
            columns[stored[i % len(stored)]][i] = float("nan")
        if i % 4 == 3:
            columns["channel"][i] = "never_seen"
        if i % 6 == 4:
            columns["device"][i] = None
        if i % 9 == 5:
            columns["country"][i] = float("nan")
    columns["amount"][0] = 0.0
    if n > 2:
        columns["amount"][2] = -12.5
        columns["amount"][n - 1] = None


def test_the_spec_is_the_fraud_models_shape(sample: tuple[EncoderSpec, pd.DataFrame]) -> None:
    spec, _ = sample
    logged = {c.name for c in spec.numeric if c.log}
    assert {"amount", "user_amount_mean_7d", "merchant_amount_mean_7d"} <= logged
    assert not next(c for c in spec.numeric if c.name == "merchant_fraud_rate_7d").log
    assert [d.name for d in spec.derived] == ["amount_vs_user_mean_7d"]
    assert [c.name for c in spec.categorical] == ["currency", "category", "country", "device", "channel"]


@pytest.mark.parametrize("n", [1, 9, 64, 256])
def test_columns_are_byte_identical_to_the_frame(sample: tuple[EncoderSpec, pd.DataFrame], n: int) -> None:
    spec, rows = sample
    columns = _columns(rows.iloc[:n], spec)
    _perturb(columns, spec)
    frame = pd.DataFrame(columns)
    want = spec.encode_frame(frame)
    got = spec.encode_columns(columns)
    assert got.dtype == np.float32 and got.shape == (n, spec.input_dim)
    assert got.tobytes() == want.tobytes()
    # the perturbations reached the encoding: some rows in a categorical's "other" slot, some numeric at 0
    assert n == 1 or (got[:, spec.input_dim - 1] == 1.0).any()


def test_extra_columns_and_int_features_are_read_as_the_frame_reads_them(
        sample: tuple[EncoderSpec, pd.DataFrame]) -> None:
    spec, rows = sample
    columns: dict[str, list[Any]] = {**_columns(rows.iloc[:9], spec), "user_id": ["u"] * 9, "_unknown_entity": [1] * 9}
    columns["user_txn_count_1h"] = [int(i) for i in range(9)]
    assert spec.encode_columns(columns).tobytes() == spec.encode_frame(pd.DataFrame(columns)).tobytes()


def test_columns_match_hand_arithmetic() -> None:
    spec = EncoderSpec.from_dict({
        "version": 1, "input_dim": 2 + 1 + 3 + 2,
        "numeric": [{"name": "amount", "log": True, "mean": 1.0, "std": 2.0},
                    {"name": "count", "log": False, "mean": 3.0, "std": 0.5}],
        "derived": [{"name": "ratio", "op": "log_ratio", "args": ["amount", "count"], "mean": 0.1, "std": 1.5}],
        "categorical": [{"name": "currency", "vocab": ["EUR", "USD"]}, {"name": "device", "vocab": ["ios"]}]})
    x = spec.encode_columns({"amount": [-9.0, None], "count": [4, float("nan")], "currency": ["USD", "GBP"],
                             "device": [float("nan"), "ios"]})
    neg = -np.log1p(9.0)  # sign(x) * log1p(|x|)
    want0 = [(neg - 1.0) / 2.0, (4 - 3.0) / 0.5, (np.log(10.0 / 5.0) - 0.1) / 1.5, 0, 1, 0, 0, 1]
    want1 = [0.0, 0.0, 0.0, 0, 0, 1, 1, 0]  # missing → 0 after scaling (NaN ratio too); GBP → "other"
    np.testing.assert_allclose(x, np.array([want0, want1], dtype=np.float32), rtol=1e-6)


def test_bad_columns_are_named() -> None:
    spec = EncoderSpec.from_dict({"version": 1, "input_dim": 3,
                                  "numeric": [{"name": "amount", "log": False, "mean": 0.0, "std": 1.0}],
                                  "categorical": [{"name": "device", "vocab": ["ios"]}]})
    with pytest.raises(EncoderSpecError, match=r"columns \['device'\] are missing"):
        spec.encode_columns({"amount": [1.0]})
    with pytest.raises(EncoderSpecError, match="differ in length"):
        spec.encode_columns({"amount": [1.0, 2.0], "device": ["ios"]})
    with pytest.raises(EncoderSpecError, match="'amount' must be numeric"):
        spec.encode_columns({"amount": ["x"], "device": ["ios"]})
    assert spec.encode_columns({"amount": [], "device": []}).shape == (0, 3)
