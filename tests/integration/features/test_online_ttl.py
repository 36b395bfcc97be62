"""A feature view's ``ttl`` at the online lookup, against a real Redis online store: parity with the offline join.

Feast's Redis read returns an entity's last value however old; the point-in-time join that builds training sets
gives a view's features nulls (then their defaults) once the latest row is older than ``as_of - ttl``. The lookup
must answer as the join does. The ages are set by choosing ``as_of`` from the users' own last event times in the
validated transactions (read here with pandas), and the expected defaults are the ones fraud_v1 declares.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from mlops_config import DataConfig, FeaturesConfig
from mlops_features import OnlineFeatures, historical_features, open_store, prepare_local_data, read_validated
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
# Few rows per user over 3 days: some users are last seen on the first day, others on the last.
DATA = DataConfig(rows=900, days=3, users=300, merchants=20)
TTL = timedelta(days=7)  # feature_repo/definitions.py declares it; checked against the registry below
USER_FEATURES = ("user_txn_count_1h", "user_txn_count_24h", "user_txn_count_7d", "user_amount_sum_1h",
                 "user_amount_sum_24h", "user_amount_sum_7d", "user_amount_mean_7d", "user_amount_std_7d",
                 "user_amount_zscore", "user_distinct_merchants_24h")
MERCHANT_FEATURES = ("merchant_fraud_rate_7d", "merchant_txn_count_1d", "merchant_amount_mean_7d")
DEFAULTS = {**dict.fromkeys((*USER_FEATURES, *MERCHANT_FEATURES), 0), "merchant_fraud_rate_7d": 0.03}
US = pd.Timedelta(microseconds=1)


@pytest.fixture(scope="module")
def store_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, FeaturesConfig, pd.Series]]:
    import redis

    url = "redis://127.0.0.1:6379/0"
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis at {url} is not reachable ({exc}); start it (see .ci/run)")
    root = tmp_path_factory.mktemp("online_ttl")
    shutil.copytree(REPO_ROOT / "feature_repo", root / "feature_repo", ignore=shutil.ignore_patterns("__pycache__"))
    features = FeaturesConfig(feature_service="fraud_v1",
                              online_store="redis", redis_url=url, feast_project=f"t_{uuid.uuid4().hex[:10]}")
    prepare_local_data(DATA, features, root, contract=FRAUD_CONTRACT, seed=21)
    tx = read_validated(root / DATA.validated_dir, record_id=FRAUD_CONTRACT.record_id)
    last = pd.to_datetime(tx["event_timestamp"], utc=True).groupby(tx["user_id"].astype(str)).max().sort_values()
    yield root, features, last
    open_store(features, root).teardown()


@pytest.fixture(params=["direct", "feast"])
def env(request: pytest.FixtureRequest, store_env: tuple[Path, FeaturesConfig, pd.Series]
        ) -> tuple[Path, FeaturesConfig, pd.Series]:
    """The store, looked up by either reader (``features.online_reader``): both apply the ttl the same way."""
    root, features, last = store_env
    return root, features.model_copy(update={"online_reader": request.param}), last


def _pair(last: pd.Series) -> tuple[str, str, pd.Timestamp]:
    """``(stale user, fresh user, as_of)``: the stale one last seen exactly 8 days before ``as_of``, the fresh one
    last seen about 6 days before (the users last seen latest, at least 1.5 days after the stale one)."""
    stale = str(last.index[0])
    as_of = last.iloc[0] + pd.Timedelta(days=8)
    fresh_candidates = last[(as_of - last <= pd.Timedelta(days=6.5)) & (as_of - last >= pd.Timedelta(days=5))]
    assert len(fresh_candidates), f"no user last seen 5-6.5 days before {as_of}: {last.tail()}"
    return stale, str(fresh_candidates.index[-1]), as_of


def _merchant(root: Path) -> str:
    return str(read_validated(root / DATA.validated_dir, record_id=FRAUD_CONTRACT.record_id)["merchant_id"].iloc[-1])


def test_a_value_older_than_its_ttl_is_served_as_the_default_and_flagged(env: tuple[Path, FeaturesConfig, Any]
                                                                        ) -> None:
    root, features, last = env
    assert open_store(features, root).get_feature_view("user_transactions").ttl == TTL
    stale, fresh, as_of = _pair(last)
    merchant = _merchant(root)
    online = OnlineFeatures(features, root, contract=FRAUD_CONTRACT)
    assert online.reader == features.online_reader
    got_stale, got_fresh = online.get([{"user_id": stale, "merchant_id": merchant},
                                       {"user_id": fresh, "merchant_id": merchant}], as_of=as_of)
    assert {n: got_stale[n] for n in USER_FEATURES} == {n: DEFAULTS[n] for n in USER_FEATURES}
    assert got_stale["unknown_user"] is True and got_stale["_unknown_entity"] is True
    assert got_stale["unknown_merchant"] is False  # the merchant's daily row is days younger: still served
    assert got_fresh["unknown_user"] is False and got_fresh["_unknown_entity"] is False
    assert got_fresh["user_txn_count_7d"] >= 1  # its own last transaction counts in its 7-day window

    # the same stale user, asked before its expiry: its stored values, not the defaults
    before = online.get([{"user_id": stale, "merchant_id": merchant}], as_of=as_of - pd.Timedelta(days=2))[0]
    assert before["unknown_user"] is False and before["user_txn_count_7d"] >= 1


def test_the_ttl_edge_is_the_offline_joins(env: tuple[Path, FeaturesConfig, Any]) -> None:
    """Offline a row is joined while ``feature_ts >= entity_ts - ttl``: at exactly ``last + ttl`` it still counts,
    a microsecond later it does not. The online lookup must draw the line at the same instant."""
    root, features, last = env
    user, merchant = str(last.index[0]), _merchant(root)
    edge = last.iloc[0] + TTL
    online = OnlineFeatures(features, root, contract=FRAUD_CONTRACT)
    at_edge = online.get([{"user_id": user, "merchant_id": merchant}], as_of=edge)
    past = online.get([{"user_id": user, "merchant_id": merchant}], as_of=edge + US)[0]
    offline = historical_features(features, root, pd.DataFrame(
        {"user_id": [user, user], "merchant_id": [merchant, merchant], "event_timestamp": [edge, edge + US]}))
    offline = offline.sort_values("event_timestamp").reset_index(drop=True)
    assert at_edge[0]["unknown_user"] is False and not pd.isna(offline.loc[0, "user_txn_count_7d"])
    assert at_edge[0]["user_txn_count_7d"] == offline.loc[0, "user_txn_count_7d"]
    assert past["unknown_user"] is True and pd.isna(offline.loc[1, "user_txn_count_7d"])


def test_online_equals_the_offline_join_for_stale_and_fresh_entities(env: tuple[Path, FeaturesConfig, Any]) -> None:
    root, features, last = env
    stale, fresh, as_of = _pair(last)
    merchant = _merchant(root)
    got = OnlineFeatures(features, root, contract=FRAUD_CONTRACT).get([{"user_id": stale, "merchant_id": merchant},
                                              {"user_id": fresh, "merchant_id": merchant}], as_of=as_of)
    offline = historical_features(features, root, pd.DataFrame(
        {"user_id": [stale, fresh], "merchant_id": [merchant, merchant], "event_timestamp": [as_of, as_of]}))
    offline = offline.set_index("user_id")
    assert offline.loc[stale, list(USER_FEATURES)].isna().all()  # the join itself: no user row inside the ttl
    filled = offline.fillna(DEFAULTS)  # what training_set does with those nulls
    for user, served in ((stale, got[0]), (fresh, got[1])):
        for name in (*USER_FEATURES, *MERCHANT_FEATURES):
            assert served[name] == pytest.approx(float(filled.loc[user, name]), rel=1e-9, abs=1e-12), (user, name)


def test_the_skew_replay_finds_no_mismatch_for_the_stale_entity(env: tuple[Path, FeaturesConfig, Any]) -> None:
    from mlops_monitoring.skew import replay_skew

    root, features, last = env
    stale, fresh, as_of = _pair(last)
    merchant = _merchant(root)
    online = OnlineFeatures(features, root, contract=FRAUD_CONTRACT)
    rows = [{"user_id": stale, "merchant_id": merchant}, {"user_id": fresh, "merchant_id": merchant}]
    got = online.get(rows, as_of=as_of)
    log = pd.DataFrame([{**r, **{n: g[n] for n in online.names}} for r, g in zip(rows, got, strict=True)])
    log["ts"], log["request_id"], log["degraded"] = as_of, ["r0", "r1"], False
    report = replay_skew(features, root, log, model="fraud")
    assert report.rows_compared == 2 and report.mismatch_rate == 0.0, report.examples
    assert report.features["user_txn_count_7d"].compared == 2



def test_the_skew_replay_replays_at_the_lookups_pinned_instant(env: tuple[Path, FeaturesConfig, Any]) -> None:
    """Served with ``features.online_ttl_as_of`` pinned, logged at the request's wall-clock time (here 30 days later,
    when every value is expired): the replay asks the offline store at the pinned instant, as the lookup used it."""
    from mlops_monitoring.skew import replay_skew

    root, features, last = env
    stale, fresh, as_of = _pair(last)
    pinned = features.model_copy(update={"online_ttl_as_of": as_of.to_pydatetime()})
    merchant = _merchant(root)
    online = OnlineFeatures(pinned, root, contract=FRAUD_CONTRACT)
    rows = [{"user_id": stale, "merchant_id": merchant}, {"user_id": fresh, "merchant_id": merchant}]
    got = online.get(rows)  # at the pinned as_of: the fresh user's values are served
    assert got[1]["user_txn_count_7d"] not in (None, DEFAULTS["user_txn_count_7d"])
    log = pd.DataFrame([{**r, **{n: g[n] for n in online.names}} for r, g in zip(rows, got, strict=True)])
    log["ts"], log["request_id"], log["degraded"] = as_of + pd.Timedelta(days=30), ["r0", "r1"], False
    report = replay_skew(pinned, root, log, model="fraud")
    assert report.rows_compared == 2 and report.mismatch_rate == 0.0, report.examples


def test_a_request_time_feature_reading_an_expired_view_is_computed_as_offline(
        env: tuple[Path, FeaturesConfig, Any]) -> None:
    """fraud_rt_v1's on-demand z-score reads the user's stored mean and deviation: past their ttl offline it sees
    nulls (z = 0 by its udf); online it must not compute it from the expired values Redis still holds."""
    root, features, last = env
    rt = features.model_copy(update={"feature_service": "fraud_rt_v1"})
    tx = read_validated(root / DATA.validated_dir, record_id=FRAUD_CONTRACT.record_id)
    tx["event_timestamp"] = pd.to_datetime(tx["event_timestamp"], utc=True)
    spread = tx.groupby("user_id")["amount"].agg(lambda a: a.nunique())  # 2+ distinct amounts: a deviation
    user = str(last[last.index.isin(spread[spread >= 2].index)].index[0])  # the earliest last seen of those
    as_of = last[user] + pd.Timedelta(days=8)
    request = {"user_id": user, "merchant_id": _merchant(root), "amount": 900.0}
    online = OnlineFeatures(rt, root, contract=FRAUD_CONTRACT)
    before = online.get([request], as_of=last[user] + pd.Timedelta(hours=1))[0]  # unexpired: its stored values
    assert before["user_amount_std_7d"] > 1e-9, before
    assert before["amount_zscore_user_7d"] == pytest.approx(
        (900.0 - before["user_amount_mean_7d"]) / before["user_amount_std_7d"], rel=1e-9) != 0.0
    got = online.get([request], as_of=as_of)[0]
    offline = historical_features(rt, root, pd.DataFrame([{**request, "event_timestamp": as_of}]))
    assert got["unknown_user"] is True and got["user_amount_std_7d"] == 0.0
    assert got["amount_zscore_user_7d"] == 0.0 == offline["amount_zscore_user_7d"].iloc[0]
