"""The one encoding: hand-computed values, JSON round trip, unknown categories, missing values, bad input,
the spec validated on load, and both adapters byte-identical to the encoder the platform shipped before
(kept below verbatim as the reference) on real sample rows."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from mlops_model import EncoderSpec, EncoderSpecError

DataError = EncoderSpecError


def fit_encoder(df: pd.DataFrame) -> EncoderSpec:
    return EncoderSpec.fit(df, contract=FRAUD_CONTRACT)


def encode(df: pd.DataFrame, enc: EncoderSpec | dict) -> np.ndarray:
    return EncoderSpec.from_dict(enc).encode_frame(df)

TRAIN = pd.DataFrame({
    "amount": [10.0, 100.0, 1000.0],
    "user_txn_count_1h": [1, 2, 6],
    "user_amount_mean_7d": [10.0, 10.0, 100.0],
    "category": ["grocery", "travel", "grocery"],
    "channel": ["online", "online", "card_present"],
})


def test_values_match_a_hand_computation() -> None:
    enc = fit_encoder(TRAIN)
    # 3 numeric + 1 derived + (2 + 1) category + (2 + 1) channel
    assert enc.input_dim == 3 + 1 + 3 + 3
    x = encode(TRAIN, enc)
    assert x.dtype == np.float32 and x.shape == (3, 10)
    log_amount = [math.log1p(a) for a in (10.0, 100.0, 1000.0)]
    mean, std = np.mean(log_amount), np.std(log_amount)
    assert x[:, 0] == pytest.approx([(v - mean) / std for v in log_amount], rel=1e-5)
    counts = np.array([1, 2, 6])
    assert x[:, 1] == pytest.approx((counts - counts.mean()) / counts.std(), rel=1e-5)
    ratio = [math.log(11 / 11), math.log(101 / 11), math.log(1001 / 101)]
    assert x[:, 3] == pytest.approx((np.array(ratio) - np.mean(ratio)) / np.std(ratio), rel=1e-5)
    # category vocabulary sorted: grocery, travel, <other>; channel: card_present, online, <other>
    assert x[:, 4:7].tolist() == [[1, 0, 0], [0, 1, 0], [1, 0, 0]]
    assert x[:, 7:10].tolist() == [[0, 1, 0], [0, 1, 0], [1, 0, 0]]


def test_the_spec_survives_json_and_encodes_the_same() -> None:
    enc = fit_encoder(TRAIN)
    again = json.loads(json.dumps(enc.to_dict()))
    np.testing.assert_array_equal(encode(TRAIN, enc), encode(TRAIN, again))


def test_unknown_category_and_missing_values_have_a_defined_encoding() -> None:
    enc = fit_encoder(TRAIN)
    row = pd.DataFrame({"amount": [np.nan], "user_txn_count_1h": [None], "user_amount_mean_7d": [10.0],
                        "category": ["jewelry"], "channel": [None]})
    x = encode(row, enc)[0]
    assert x[0] == 0.0 and x[1] == 0.0  # the training mean
    assert x[4:7].tolist() == [0, 0, 1]  # the "other" slot
    assert x[7:10].tolist() == [0, 0, 1]
    assert np.isfinite(x).all()


def test_column_order_of_the_frame_does_not_matter() -> None:
    enc = fit_encoder(TRAIN)
    np.testing.assert_array_equal(encode(TRAIN[TRAIN.columns[::-1]], enc), encode(TRAIN, enc))


def test_bad_input_is_named() -> None:
    enc = fit_encoder(TRAIN)
    with pytest.raises(DataError, match=r"columns \['channel'\] are missing"):
        encode(TRAIN.drop(columns=["channel"]), enc)
    with pytest.raises(DataError, match="'amount' must be numeric"):
        encode(TRAIN.assign(amount=["a", "b", "c"]), enc)
    with pytest.raises(DataError, match="empty"):
        fit_encoder(TRAIN.iloc[:0])
    with pytest.raises(DataError, match="version"):
        encode(TRAIN, {**enc.to_dict(), "version": 99})


@pytest.mark.parametrize(("change", "problem"), [
    ({"input_dim": 11}, "input_dim 11 != 10"),
    ({"numeric": [{"name": "amount", "log": True, "mean": 1.0, "std": 0.0}]}, "greater than 0"),
    ({"extra": 1}, "extra"),
    ({"derived": [{"name": "r", "op": "log_ratio", "args": ["amount", "nope"], "mean": 0, "std": 1}]}, "nope"),
    ({"categorical": [{"name": "channel", "vocab": ["a", "a"]}]}, "repeated"),
])
def test_a_bad_spec_is_refused_on_load_naming_the_problem(change: dict, problem: str) -> None:
    raw = {**fit_encoder(TRAIN).to_dict(), **change}
    with pytest.raises(EncoderSpecError, match=problem):
        EncoderSpec.from_dict(raw, source="model.json")


def test_the_spec_is_frozen() -> None:
    enc = fit_encoder(TRAIN)
    with pytest.raises(ValueError, match="frozen"):
        enc.input_dim = 3  # type: ignore[misc]


def test_records_adapter_handles_missing_keys_nan_and_unknowns_like_the_frame() -> None:
    enc = fit_encoder(TRAIN)
    records = [{"amount": float("nan"), "user_txn_count_1h": None, "user_amount_mean_7d": 10.0,
                "category": "jewelry", "channel": float("nan")},
               {"amount": -3.5, "user_amount_mean_7d": 1e9, "category": "grocery", "channel": "online"}]
    frame = pd.DataFrame(records)
    assert enc.encode_records(records).tobytes() == enc.encode_frame(frame).tobytes()
    with pytest.raises(EncoderSpecError, match="'amount' must be numeric"):
        enc.encode_records([{**records[1], "amount": "x"}])


def test_both_adapters_are_byte_identical_to_the_previous_encoder_on_sample_rows(tmp_path: Path) -> None:
    import importlib.util

    from mlops_features import generate_transactions

    spec_file = importlib.util.spec_from_file_location(
        "fraud_windows_for_encoder", Path(__file__).resolve().parents[3] / "feature_repo/windows.py")
    assert spec_file is not None and spec_file.loader is not None
    windows = importlib.util.module_from_spec(spec_file)
    spec_file.loader.exec_module(windows)
    compute_user_features, compute_merchant_features = windows.user_windows_udf, windows.merchant_risk_udf

    paths = generate_transactions(tmp_path, rows=3000, days=2, seed=3, users=120, merchants=30)
    tx = pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)
    users = compute_user_features(tx).drop(columns=["created"])
    merchants = compute_merchant_features(tx).drop(columns=["created", "event_timestamp"])
    df = tx.merge(users, on=["user_id", "event_timestamp"], how="left")
    df = df.merge(merchants.groupby("merchant_id").last().reset_index(), on="merchant_id", how="left")
    df.loc[df.index % 7 == 0, "merchant_fraud_rate_7d"] = np.nan  # missing store values too
    df.loc[df.index % 11 == 0, "channel"] = "never_seen"
    train, rows = df.iloc[:2000], df.iloc[2000:]
    spec = EncoderSpec.fit(train, contract=FRAUD_CONTRACT)
    legacy = _legacy_fit(train)
    assert spec.to_dict() == json.loads(json.dumps(legacy))
    want = _legacy_encode(rows, legacy)
    assert spec.encode_frame(rows).tobytes() == want.tobytes()
    assert spec.encode_records(rows.to_dict("records")).tobytes() == want.tobytes()


def _spec() -> dict[str, Any]:
    return {"version": 1, "input_dim": 2 + 1 + 3 + 2,
            "numeric": [{"name": "amount", "log": True, "mean": 1.0, "std": 2.0},
                        {"name": "count", "log": False, "mean": 3.0, "std": 0.5}],
            "derived": [{"name": "ratio", "op": "log_ratio", "args": ["amount", "count"], "mean": 0.1, "std": 1.5}],
            "categorical": [{"name": "currency", "vocab": ["EUR", "USD"]}, {"name": "device", "vocab": ["ios"]}]}


def test_records_adapter_matches_hand_arithmetic() -> None:
    spec = EncoderSpec.from_dict(_spec())
    x = spec.encode_records([{"amount": 9.0, "count": 4, "currency": "USD", "device": "web"},
                                {"amount": None, "count": None, "currency": None, "device": "ios"}])
    log9 = np.log1p(9.0)
    want0 = [(log9 - 1.0) / 2.0, (4 - 3.0) / 0.5, (np.log(10.0 / 5.0) - 0.1) / 1.5, 0, 1, 0, 0, 1]
    want1 = [0.0, 0.0, 0.0, 0, 0, 1, 1, 0]  # missing → 0 after scaling; None → the "other" slot
    np.testing.assert_allclose(x, np.array([want0, want1], dtype=np.float32), rtol=1e-6)


# --- the encoder as it was before mlops_model (mlops_features.encoding, version 1), verbatim but for names ---
_USER = ("user_txn_count_1h", "user_txn_count_24h", "user_txn_count_7d", "user_amount_sum_1h", "user_amount_sum_24h",
         "user_amount_sum_7d", "user_amount_mean_7d", "user_amount_std_7d", "user_amount_zscore",
         "user_distinct_merchants_24h")
_MERCHANT = ("merchant_fraud_rate_7d", "merchant_txn_count_1d", "merchant_amount_mean_7d")
_NUMERIC = ("amount", *_USER, *_MERCHANT)
_CATEGORICAL = ("currency", "category", "country", "device", "channel")
_DERIVED = ({"name": "amount_vs_user_mean_7d", "op": "log_ratio", "args": ["amount", "user_amount_mean_7d"]},)
_LOG_PREFIXES = ("amount", "user_amount_sum", "user_amount_mean", "user_amount_std", "merchant_amount")
_OPS = {"log_ratio": lambda a, b: np.log((np.abs(a) + 1.0) / (np.abs(b) + 1.0))}


def _legacy_fit(df: pd.DataFrame) -> dict:
    numeric = [c for c in _NUMERIC if c in df.columns]
    categorical = [c for c in _CATEGORICAL if c in df.columns]
    spec_numeric = []
    for name in numeric:
        log = name.startswith(_LOG_PREFIXES)
        spec_numeric.append({"name": name, "log": log, **_moments(_numeric(df, name, log))})
    spec_derived = [{**d, **_moments(_derive(df, d))} for d in _DERIVED if all(a in numeric for a in d["args"])]
    spec_categorical = [{"name": n, "vocab": sorted(df[n].dropna().astype(str).unique().tolist())} for n in categorical]
    dim = len(spec_numeric) + len(spec_derived) + sum(len(c["vocab"]) + 1 for c in spec_categorical)
    return {"version": 1, "numeric": spec_numeric, "derived": spec_derived, "categorical": spec_categorical,
            "input_dim": dim}


def _legacy_encode(df: pd.DataFrame, encoder: dict) -> np.ndarray:
    n = len(df)
    out = np.zeros((n, encoder["input_dim"]), dtype=np.float32)
    col = 0
    for spec in encoder["numeric"]:
        out[:, col] = _scale(_numeric(df, spec["name"], spec["log"]), spec)
        col += 1
    for spec in encoder["derived"]:
        out[:, col] = _scale(_derive(df, spec), spec)
        col += 1
    for spec in encoder["categorical"]:
        index = {v: i for i, v in enumerate(spec["vocab"])}
        values = df[spec["name"]].astype(object).where(df[spec["name"]].notna(), None)
        slots = np.fromiter((index.get(str(v), len(index)) if v is not None else len(index) for v in values),
                            dtype=np.int64, count=n)
        out[np.arange(n), col + slots] = 1.0
        col += len(index) + 1
    return out


def _numeric(df: pd.DataFrame, name: str, log: bool) -> np.ndarray:
    values = pd.to_numeric(df[name], errors="raise").to_numpy(dtype=np.float64, na_value=np.nan)
    return np.sign(values) * np.log1p(np.abs(values)) if log else values


def _derive(df: pd.DataFrame, spec: dict) -> np.ndarray:
    args = [pd.to_numeric(df[a], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan) for a in spec["args"]]
    return _OPS[spec["op"]](*args)


def _moments(values: np.ndarray) -> dict:
    finite = values[np.isfinite(values)]
    mean = float(finite.mean()) if finite.size else 0.0
    std = float(finite.std()) if finite.size else 1.0
    return {"mean": mean, "std": std if std > 1e-12 else 1.0}


def _scale(values: np.ndarray, spec: dict) -> np.ndarray:
    scaled = (values - spec["mean"]) / spec["std"]
    return np.where(np.isfinite(scaled), scaled, 0.0)
