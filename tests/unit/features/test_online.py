"""Online lookups on SQLite: parity with the offline store, defaults and flags, incremental materialization.

``OnlineSuite`` is reused by tests/integration/features/test_online_redis.py against a real Redis server;
only the ``online_overrides`` fixture differs.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mlops_config import DataConfig, FeaturesConfig
from mlops_features import (
    FeatureStoreError,
    OnlineFeatures,
    apply_repo,
    historical_features,
    materialize,
    open_store,
    prepare_local_data,
)
from mlops_features.schema import raw_schema
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from tests.support import sample_as_of

FRAUD_SCHEMA = raw_schema(FRAUD_CONTRACT)  # fraud's raw batches (the sample generator's)
REPO_ROOT = Path(__file__).resolve().parents[3]
USER_FEATURES = ("user_txn_count_1h", "user_txn_count_24h", "user_txn_count_7d", "user_amount_sum_1h",
                 "user_amount_sum_24h", "user_amount_sum_7d", "user_amount_mean_7d", "user_amount_std_7d",
                 "user_amount_zscore", "user_distinct_merchants_24h")
MERCHANT_FEATURES = ("merchant_fraud_rate_7d", "merchant_txn_count_1d", "merchant_amount_mean_7d")
ALL = (*USER_FEATURES, *MERCHANT_FEATURES)
DEFAULTS = {**dict.fromkeys(ALL, 0), "merchant_fraud_rate_7d": 0.03}  # as fraud_v1 declares them


def _cfg(root: Path, overrides: dict[str, Any], **more: Any) -> FeaturesConfig:
    shutil.copytree(REPO_ROOT / "feature_repo", root / "feature_repo", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    # served as the demo serves the sample (its dates are fixed): as of the day after it, inside every view's ttl
    return FeaturesConfig(**{"feature_service": "fraud_v1", "online_ttl_as_of": sample_as_of(), **overrides, **more})


class OnlineSuite:
    """Tests that hold for every online store; subclasses provide ``online_overrides``."""

    @pytest.fixture(scope="class")
    @classmethod
    def env(cls, online_overrides: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[Path, FeaturesConfig, OnlineFeatures]]:
        root = tmp_path_factory.mktemp("online")
        features = _cfg(root, online_overrides)
        prepare_local_data(DataConfig(rows=3_000, days=2, users=150, merchants=40), features, root,
                           contract=FRAUD_CONTRACT, seed=5)
        yield root, features, OnlineFeatures(features, root, contract=FRAUD_CONTRACT)
        open_store(features, root).teardown()

    def test_online_values_equal_the_offline_values_at_the_same_time(self, env: tuple) -> None:
        root, features, online = env
        users = pd.read_parquet(root / features.source_dir / "user_transactions.parquet")
        merchants = pd.read_parquet(root / features.source_dir / "merchant_risk.parquet")
        latest = max(users["event_timestamp"].max(), merchants["event_timestamp"].max()) + pd.Timedelta(seconds=1)
        rng = np.random.default_rng(0)
        pairs = pd.DataFrame({
            "user_id": rng.choice(users["user_id"].unique(), 25, replace=False),
            "merchant_id": rng.choice(merchants["merchant_id"].unique(), 25),
            "event_timestamp": latest,
        })
        offline = historical_features(features, root, pairs).set_index(["user_id", "merchant_id"])
        got = online.get(pairs[["user_id", "merchant_id"]].to_dict("records"))
        for row, values in zip(pairs.itertuples(), got, strict=True):
            expected = offline.loc[(row.user_id, row.merchant_id)]
            assert not values["_unknown_entity"]
            for name in ALL:
                assert values[name] == pytest.approx(expected[name], rel=1e-12, abs=1e-12), (row, name)
        # And both equal the source table's latest row for the user (computed independently with pandas).
        last = users.sort_values("event_timestamp").groupby("user_id").tail(1).set_index("user_id")
        for row, values in zip(pairs.itertuples(), got, strict=True):
            assert values["user_txn_count_7d"] == last.loc[row.user_id, "user_txn_count_7d"]

    def test_unknown_entities_get_defaults_and_flags(self, env: tuple) -> None:
        root, features, online = env
        defaults = DEFAULTS
        known_merchant = pd.read_parquet(root / features.source_dir / "merchant_risk.parquet")["merchant_id"].iloc[0]
        both, user_only = online.get([{"user_id": "U-nobody", "merchant_id": "M-nobody"},
                                      {"user_id": "U-nobody", "merchant_id": known_merchant}])
        assert both["unknown_user"] and both["unknown_merchant"] and both["_unknown_entity"]
        assert {n: both[n] for n in ALL} == {n: defaults[n] for n in ALL}
        assert user_only["unknown_user"] and not user_only["unknown_merchant"] and user_only["_unknown_entity"]
        known_user = pd.read_parquet(root / features.source_dir / "user_transactions.parquet")["user_id"].iloc[0]
        full = online.get([{"user_id": known_user, "merchant_id": known_merchant}])[0]
        assert {n: user_only[n] for n in MERCHANT_FEATURES} == {n: full[n] for n in MERCHANT_FEATURES}

    def test_a_batch_keeps_order_and_matches_single_lookups(self, env: tuple) -> None:
        root, features, online = env
        users = pd.read_parquet(root / features.source_dir / "user_transactions.parquet")["user_id"].unique()
        rows = [{"user_id": u, "merchant_id": "M00001"} for u in users[:100]]
        batch = online.get(rows)
        assert len(batch) == len(rows)
        for row, values in zip(rows[::10], batch[::10], strict=True):
            assert online.get([row])[0] == values
        # by column (what serving encodes from): the same values, keys in the same order, row i at index i
        columns = online.get_columns(rows)
        assert list(columns) == list(batch[0]) and all(len(c) == len(rows) for c in columns.values())
        assert [{k: columns[k][i] for k in columns} for i in range(len(rows))] == batch
        assert online.get_columns([]) == {}

    def test_the_direct_reader_serves_redis_only(self, env: tuple) -> None:
        _, features, online = env
        assert features.online_reader == "direct"  # the default: SQLite keeps Feast's reader regardless
        assert online.reader == ("direct" if features.online_store == "redis" else "feast")

    def test_bad_rows_and_ping(self, env: tuple) -> None:
        _, _, online = env
        assert online.ping() is True
        assert online.get([]) == []
        with pytest.raises(FeatureStoreError, match=r"entity row 1 lacks \['merchant_id'\]"):
            online.get([{"user_id": "U1", "merchant_id": "M1"}, {"user_id": "U1"}])

    def test_incremental_materialization_reaches_the_online_store(
        self, online_overrides: dict[str, Any], tmp_path: Path
    ) -> None:
        features = _cfg(tmp_path, online_overrides)
        src = tmp_path / features.source_dir
        src.mkdir(parents=True)
        t0 = pd.Timestamp("2026-11-02 08:00", tz="UTC")

        def write(stamps: list[pd.Timestamp]) -> None:
            n = len(stamps)
            tx = pd.DataFrame({
                "transaction_id": [f"T{i}" for i in range(n)], "user_id": "U1", "merchant_id": "M1",
                "event_timestamp": stamps, "created": stamps, "amount": 10.0, "currency": "EUR",
                "category": "grocery", "country": "DE", "device": "ios", "channel": "online",
                "is_fraud": np.zeros(n, dtype=np.int8)})
            pq.write_table(pa.Table.from_pandas(tx, schema=FRAUD_SCHEMA, preserve_index=False),
                           src / "transactions.parquet")

        write([t0])
        apply_repo(features, tmp_path)
        try:
            materialize(features, tmp_path, incremental=True, end=t0 + timedelta(minutes=1))
            online = OnlineFeatures(features, tmp_path, contract=FRAUD_CONTRACT)
            assert online.get([{"user_id": "U1", "merchant_id": "M1"}])[0]["user_txn_count_1h"] == 1
            write([t0, t0 + timedelta(hours=1)])  # exactly 1 h later: the window [t - 1h, t] holds both
            materialize(features, tmp_path, incremental=True, end=t0 + timedelta(hours=2))
            assert online.get([{"user_id": "U1", "merchant_id": "M1"}])[0]["user_txn_count_1h"] == 2
            view = open_store(features, tmp_path).get_feature_view("user_transactions")
            assert len(view.materialization_intervals) == 2
            # a udf view reads its whole source again: its windows need the history before the last run
            assert view.materialization_intervals[1][0] == pd.Timestamp("2000-01-01", tz="UTC")
        finally:
            open_store(features, tmp_path).teardown()


class TestSqlite(OnlineSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def online_overrides(cls) -> dict[str, Any]:
        return {"online_store": "sqlite"}
