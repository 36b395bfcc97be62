"""Point-in-time correctness of training sets, on hand-built feature tables: no leakage, TTL as configured."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mlops_config import DataConfig, FeaturesConfig
from mlops_features import FeatureStoreError, apply_repo, historical_features, training_set
from mlops_features.schema import raw_schema
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

FRAUD_SCHEMA = raw_schema(FRAUD_CONTRACT)  # fraud's raw batches (the sample generator's)
USER_FEATURES = ("user_txn_count_1h", "user_txn_count_24h", "user_txn_count_7d", "user_amount_sum_1h",
                 "user_amount_sum_24h", "user_amount_sum_7d", "user_amount_mean_7d", "user_amount_std_7d",
                 "user_amount_zscore", "user_distinct_merchants_24h")
MERCHANT_FEATURES = ("merchant_fraud_rate_7d", "merchant_txn_count_1d", "merchant_amount_mean_7d")

MakeFeatures = Callable[..., FeaturesConfig]
Built = tuple[Path, DataConfig]
DAY = pd.Timestamp("2026-11-05", tz="UTC")


def _at(offset: str) -> pd.Timestamp:
    return DAY + pd.Timedelta(offset)


def _user_rows(rows: list[tuple[str, str, int]]) -> pd.DataFrame:
    """(user, time offset, marker): every user feature carries ``marker`` so the joined row is identifiable."""
    df = pd.DataFrame({"user_id": [r[0] for r in rows], "event_timestamp": [_at(r[1]) for r in rows]})
    df["created"] = df["event_timestamp"]
    for name in USER_FEATURES:
        df[name] = [r[2] for r in rows]
        df[name] = df[name].astype("int64" if "count" in name or "distinct" in name else "float64")
    return df


def _merchant_rows(rows: list[tuple[str, str, float]]) -> pd.DataFrame:
    df = pd.DataFrame({"merchant_id": [r[0] for r in rows], "event_timestamp": [_at(r[1]) for r in rows]})
    df["created"] = df["event_timestamp"]
    df["merchant_fraud_rate_7d"] = [r[2] for r in rows]
    df["merchant_txn_count_1d"] = np.int64(7)
    df["merchant_amount_mean_7d"] = 1.0
    return df


def _labels(rows: list[tuple[str, str, str, str]]) -> pd.DataFrame:
    """(transaction id, user, merchant, time offset) → validated rows."""
    n = len(rows)
    return pd.DataFrame({
        "transaction_id": [r[0] for r in rows], "user_id": [r[1] for r in rows], "merchant_id": [r[2] for r in rows],
        "event_timestamp": [_at(r[3]) for r in rows], "created": [_at(r[3]) for r in rows],
        "amount": [12.5] * n, "currency": ["EUR"] * n, "category": ["grocery"] * n, "country": ["DE"] * n,
        "device": ["ios"] * n, "channel": ["online"] * n, "is_fraud": np.zeros(n, dtype=np.int8),
    })


USERS = _user_rows([("U1", "10h", 1), ("U1", "12h", 5), ("U1", "1d 13h", 9), ("U3", "-3d", 4)])
MERCHANTS = _merchant_rows([("M1", "0h", 0.25), ("M1", "1d", 0.5)])
LABELS = _labels([
    ("before-any", "U1", "M1", "9h"),           # no user row yet; merchant row of 00:00
    ("between", "U1", "M1", "11h"),             # 10:00 row; the 12:00 row is in the future
    ("same-instant", "U1", "M1", "12h"),        # the 12:00 row is stamped at the label's own time: not used
    ("just-after", "U1", "M1", "12h 0.001s"),   # now the 12:00 row is known
    ("within-ttl", "U1", "M1", "1d 11h"),       # 12:00 row is 23 h old (TTL 24 h); merchant row of day 2
    ("after-new", "U1", "M1", "1d 14h"),        # the 1d 13:00 row
    ("expired", "U3", "M1", "-1d"),             # U3's only row is 2 days old: past the TTL
    ("unknown", "U404", "M404", "12h"),         # no rows at all
])
EXPECTED_USER = {"before-any": None, "between": 1, "same-instant": 1, "just-after": 5, "within-ttl": 5,
                 "after-new": 9, "expired": None, "unknown": None}
EXPECTED_RATE = {"before-any": 0.25, "between": 0.25, "same-instant": 0.25, "just-after": 0.25,
                 "within-ttl": 0.5, "after-new": 0.5, "expired": None, "unknown": None}


@pytest.fixture(scope="module")
def hand_built(tmp_path_factory: pytest.TempPathFactory, make_features: MakeFeatures
               ) -> tuple[Path, DataConfig]:
    root = tmp_path_factory.mktemp("pit")
    (root / "data/features").mkdir(parents=True)
    (root / "data/validated").mkdir(parents=True)
    USERS.to_parquet(root / "data/features/user_transactions.parquet", index=False)
    MERCHANTS.to_parquet(root / "data/features/merchant_risk.parquet", index=False)
    pq.write_table(pa.Table.from_pandas(LABELS, schema=FRAUD_SCHEMA, preserve_index=False),
                   root / "data/validated/labels.parquet")
    apply_repo(make_features(root, ttl_days=1), root)
    return root, DataConfig()


def test_no_feature_value_from_the_label_time_or_later_is_used(hand_built: Built, make_features: MakeFeatures) -> None:
    root, data = hand_built
    df = training_set(make_features(root, ttl_days=1), data, root, fill_defaults=False,
                      contract=FRAUD_CONTRACT).set_index("transaction_id")
    for tid, expected in EXPECTED_USER.items():
        got = df.loc[tid, "user_txn_count_1h"]
        assert (pd.isna(got) if expected is None else got == expected), (tid, got, expected)
        for name in USER_FEATURES:  # the whole row comes from one feature row
            got_f = df.loc[tid, name]
            assert (pd.isna(got_f) if expected is None else got_f == expected), (tid, name)
    for tid, expected in EXPECTED_RATE.items():
        got = df.loc[tid, "merchant_fraud_rate_7d"]
        assert (pd.isna(got) if expected is None else got == pytest.approx(expected)), (tid, got, expected)


def test_output_keeps_every_label_its_time_and_columns(hand_built: Built, make_features: MakeFeatures) -> None:
    root, data = hand_built
    df = training_set(make_features(root, ttl_days=1), data, root, contract=FRAUD_CONTRACT)
    assert len(df) == len(LABELS)
    assert list(df.columns) == [
        "transaction_id", "event_timestamp", "user_id", "merchant_id", "amount", "currency", "category", "country",
        "device", "channel", *USER_FEATURES, *MERCHANT_FEATURES, "is_fraud"]
    by_id = df.set_index("transaction_id")
    for row in LABELS.itertuples():
        assert by_id.loc[row.transaction_id, "event_timestamp"] == row.event_timestamp
    assert df["event_timestamp"].is_monotonic_increasing


def test_missing_values_get_the_repo_defaults(hand_built: Built, make_features: MakeFeatures) -> None:
    root, data = hand_built
    df = training_set(make_features(root, ttl_days=1), data, root, contract=FRAUD_CONTRACT).set_index("transaction_id")
    assert not df.isna().any().any()
    assert df.loc["expired", "user_txn_count_1h"] == 0
    assert df.loc["unknown", "merchant_fraud_rate_7d"] == pytest.approx(0.03)


def test_a_longer_ttl_reaches_older_values(tmp_path: Path, hand_built: Built, make_features: MakeFeatures) -> None:
    root, data = hand_built
    cfg = make_features(root, ttl_days=3, registry=str(tmp_path / "registry.db"))
    apply_repo(cfg, root)
    df = training_set(cfg, data, root, fill_defaults=False, contract=FRAUD_CONTRACT).set_index("transaction_id")
    assert df.loc["expired", "user_txn_count_1h"] == 4  # 2 days old, inside a 3-day TTL
    assert pd.isna(df.loc["unknown", "user_txn_count_1h"])


def test_duckdb_offline_store_keeps_rows_without_values(hand_built: Built, make_features: MakeFeatures) -> None:
    """Pins the chosen offline store: rows with nothing inside the TTL come back as nulls, never dropped."""
    root, _ = hand_built
    entity_df = LABELS[["user_id", "merchant_id", "event_timestamp"]]
    df = historical_features(make_features(root, ttl_days=1, offline_store="duckdb"), root, entity_df)
    assert len(df) == len(entity_df)
    assert df["user_txn_count_1h"].isna().sum() == 3  # before-any, expired, unknown


def test_file_offline_store_would_drop_rows_and_training_set_refuses(
    hand_built: Built, make_features: MakeFeatures
) -> None:
    """Why duckdb: Feast's ``file`` store drops such rows; training_set turns that into an error, not a loss."""
    root, data = hand_built
    cfg = make_features(root, ttl_days=1, offline_store="file")
    entity_df = LABELS[["user_id", "merchant_id", "event_timestamp"]]
    assert len(historical_features(cfg, root, entity_df)) < len(entity_df)
    with pytest.raises(FeatureStoreError, match="drops rows"):
        training_set(cfg, data, root, contract=FRAUD_CONTRACT)
