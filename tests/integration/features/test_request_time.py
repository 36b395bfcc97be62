"""The request-time feature ``amount_zscore_user_7d`` (an OnDemandFeatureView in feature_repo/request_time.py).

One function at training (the point-in-time join passes each labelled transaction's amount) and at serving
(the online lookup passes the request's amount), against a real Redis online store. The expected values are
computed here by hand from the validated transactions (pandas' own mean and sample deviation over the user's
7 days up to their latest earlier transaction), not from the platform's code.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlops_config import DataConfig, FeaturesConfig
from mlops_features import (
    FeatureStoreError,
    OnlineFeatures,
    historical_features,
    open_store,
    prepare_local_data,
    read_validated,
    training_set,
)
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
# Ending yesterday: the online store's TTL counts from now, so the latest values must be younger than 7 days.
DATA = DataConfig(rows=3_000, days=2, users=150, merchants=40,
                  start_date=(pd.Timestamp.now(tz="UTC").normalize() - pd.Timedelta(days=2)).strftime("%Y-%m-%d"))
WEEK = pd.Timedelta(days=7)
FEATURE = "amount_zscore_user_7d"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, FeaturesConfig, pd.DataFrame]]:
    import redis

    url = "redis://127.0.0.1:6379/0"
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis at {url} is not reachable ({exc}); start it (see .ci/run)")
    root = tmp_path_factory.mktemp("request_time")
    shutil.copytree(REPO_ROOT / "feature_repo", root / "feature_repo", ignore=shutil.ignore_patterns("__pycache__"))
    features = FeaturesConfig(online_store="redis", redis_url=url, feast_project=f"t_{uuid.uuid4().hex[:10]}",
                              feature_service="fraud_rt_v1")
    prepare_local_data(DATA, features, root, contract=FRAUD_CONTRACT, seed=11)
    tx = read_validated(root / DATA.validated_dir, record_id=FRAUD_CONTRACT.record_id)
    tx["event_timestamp"] = pd.to_datetime(tx["event_timestamp"], utc=True)
    yield root, features, tx.sort_values("event_timestamp").reset_index(drop=True)
    open_store(features, root).teardown()


def _by_hand(tx: pd.DataFrame, user: str, at: pd.Timestamp, amount: float) -> float:
    """z of ``amount`` against the user's 7-day mean / sample std as stored after their latest transaction before
    ``at`` (0: no such transaction inside the 7-day TTL, fewer than 2 amounts, or no deviation)."""
    mine = tx[(tx["user_id"] == user) & (tx["event_timestamp"] < at)]
    if mine.empty:
        return 0.0
    last = mine["event_timestamp"].max()
    if last < at - WEEK:
        return 0.0
    window = mine.loc[mine["event_timestamp"] >= last - WEEK, "amount"].astype(float)
    if len(window) < 2 or window.std(ddof=1) <= 1e-9:
        return 0.0
    return float((amount - window.mean()) / window.std(ddof=1))


def test_online_value_equals_offline_value_equals_the_hand_computation(env: tuple[Path, FeaturesConfig, Any]) -> None:
    root, features, tx = env
    latest = tx["event_timestamp"].max()
    assert pd.Timestamp.now(tz="UTC") - latest < WEEK, "the sample must end inside the TTL of today"
    users = tx.loc[tx["event_timestamp"] > latest - pd.Timedelta(hours=12), "user_id"].drop_duplicates().head(20)
    rng = np.random.default_rng(3)
    requests = pd.DataFrame({"user_id": users.to_numpy(), "merchant_id": tx["merchant_id"].iloc[0],
                             "amount": np.round(rng.uniform(1, 900, len(users)), 2)})
    requests.loc[len(requests)] = {"user_id": "U_NEVER_SEEN", "merchant_id": "M_NEVER_SEEN", "amount": 50.0}

    online = OnlineFeatures(features, root, contract=FRAUD_CONTRACT)
    assert online.request_fields == ("amount",)
    got = online.get(requests.to_dict("records"))
    offline = historical_features(features, root, requests.assign(event_timestamp=latest + pd.Timedelta(seconds=1)))
    offline = offline.set_index("user_id")
    now = pd.Timestamp.now(tz="UTC")
    nonzero = 0
    for row, values in zip(requests.itertuples(), got, strict=True):
        expected = _by_hand(tx, row.user_id, now, row.amount)
        nonzero += expected != 0.0
        assert values[FEATURE] == pytest.approx(expected, rel=1e-9, abs=1e-9), row.user_id
        assert offline.loc[row.user_id, FEATURE] == pytest.approx(expected, rel=1e-9, abs=1e-9), row.user_id
        assert set(values) >= {"user_amount_mean_7d", "merchant_fraud_rate_7d"}  # fraud_v1's features too
    assert nonzero >= 10, "the users chosen must have real statistics, or the test shows nothing"
    assert got[-1][FEATURE] == 0.0 and got[-1]["unknown_user"] is True


def test_training_rows_use_each_transactions_own_amount(env: tuple[Path, FeaturesConfig, Any]) -> None:
    root, features, tx = env
    train = training_set(features, DATA, root, contract=FRAUD_CONTRACT)
    assert len(train) == len(tx) and FEATURE in train.columns
    sample = train.sample(300, random_state=1)
    expected = [_by_hand(tx, r.user_id, r.event_timestamp, r.amount) for r in sample.itertuples()]
    np.testing.assert_allclose(sample[FEATURE].to_numpy(dtype=float), expected, rtol=1e-9, atol=1e-9)
    assert np.count_nonzero(expected) > 100


def test_fraud_v1_is_unchanged_and_a_lookup_without_the_amount_is_refused(env: tuple[Path, FeaturesConfig, Any]
                                                                         ) -> None:
    root, features, tx = env
    v1 = features.model_copy(update={"feature_service": "fraud_v1"})
    v1_online = OnlineFeatures(v1, root, contract=FRAUD_CONTRACT)
    assert v1_online.request_fields == ()
    assert FEATURE not in v1_online.names and len(v1_online.names) == 13
    rt = OnlineFeatures(features, root, contract=FRAUD_CONTRACT)
    assert rt.names == [*v1_online.names, FEATURE]
    user, merchant = tx["user_id"].iloc[-1], tx["merchant_id"].iloc[-1]
    with pytest.raises(FeatureStoreError, match=r"lacks request field\(s\) \['amount'\].*'fraud_rt_v1'"):
        rt.get([{"user_id": user, "merchant_id": merchant}])
    same = v1_online.get([{"user_id": user, "merchant_id": merchant}])[0]
    with_rt = rt.get([{"user_id": user, "merchant_id": merchant, "amount": 10.0}])[0]
    assert {k: with_rt[k] for k in same} == same
    with pytest.raises(FeatureStoreError, match="expected those columns in the entity frame"):
        historical_features(features, root, pd.DataFrame({"user_id": [user], "merchant_id": [merchant],
                                                          "event_timestamp": [tx["event_timestamp"].iloc[-1]]}))


def test_the_serving_lookup_passes_the_request_amount(env: tuple[Path, FeaturesConfig, Any]) -> None:
    """Serving's FeatureLookup hands the source the request fields its on-demand views read (before: only the
    entity keys, and the lookup of fraud_rt_v1 failed)."""
    from mlops_model import EncoderSpec
    from mlops_serving.lookup import FeatureLookup

    root, features, tx = env
    lookup = FeatureLookup(OnlineFeatures(features, root, contract=FRAUD_CONTRACT))
    spec = EncoderSpec.fit(training_set(features, DATA, root, contract=FRAUD_CONTRACT), contract=FRAUD_CONTRACT)
    lookup.configure(spec, contract=FRAUD_CONTRACT)
    latest = tx["event_timestamp"].max()
    users = tx.loc[tx["event_timestamp"] > latest - pd.Timedelta(hours=12), "user_id"].drop_duplicates().head(5)
    rows = [{**tx.iloc[-1][["merchant_id", "currency", "category", "country", "device", "channel"]].to_dict(),
             "user_id": u, "amount": 123.45} for u in users]
    result = lookup.get(rows)
    assert not result.degraded
    now = pd.Timestamp.now(tz="UTC")
    for row, values in zip(rows, result.features, strict=True):
        assert values[FEATURE] == pytest.approx(_by_hand(tx, row["user_id"], now, 123.45), rel=1e-9, abs=1e-9)
