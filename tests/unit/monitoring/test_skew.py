"""Skew replay against a real Feast store (SQLite online, duckdb offline): each injected kind of skew is named.

The "served" rows are what a transformer would have logged: the online store's answer through
``mlops_features.OnlineFeatures`` at serving time. The injections are real store states (an expired TTL, a
day ingested but not materialized, entities the online store never saw) or a served value computed another
way; a clean run must report zero mismatches.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from mlops_config import DataConfig, FeaturesConfig
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

REPO_ROOT = Path(__file__).resolve().parents[3]
SMALL = {"rows": 3_000, "days": 2, "users": 120, "merchants": 30}


def features_cfg(root: Path) -> FeaturesConfig:
    shutil.copytree(REPO_ROOT / "feature_repo", root / "feature_repo", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return FeaturesConfig(repo_path="feature_repo", feature_service="fraud_v1",
                          online_store_path=".mlops/feast/online.db", registry=".mlops/feast/registry.db",
                          source_dir="data/features")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DataConfig, FeaturesConfig]:
    from mlops_features import prepare_local_data

    root = tmp_path_factory.mktemp("skew")
    data = DataConfig(**SMALL)
    features = features_cfg(root)
    prepare_local_data(data, features, root, contract=FRAUD_CONTRACT, seed=5)
    return root, data, features


def served_log(features: FeaturesConfig, root: Path, entities: pd.DataFrame, ts: pd.Timestamp,
               looked_up_at: pd.Timestamp | None = None) -> pd.DataFrame:
    """Prediction-log rows for ``entities`` served at ``ts``: the online store's answer, as the transformer logs it.
    ``looked_up_at`` (default ``ts``) is the instant the lookup applied each view's ttl from: an earlier one logs
    what a store that kept values past their ttl would have served at ``ts``."""
    from mlops_features import OnlineFeatures

    online = OnlineFeatures(features, root, contract=FRAUD_CONTRACT)
    rows = entities[["user_id", "merchant_id"]].astype(str).to_dict("records")
    for row, (_, entity) in zip(rows, entities.iterrows(), strict=True):  # request fields on-demand views read
        row.update({k: float(entity[k]) for k in online.request_fields})
    got = online.get(rows, as_of=ts if looked_up_at is None else looked_up_at)
    frame = pd.DataFrame([{**r, **{n: g[n] for n in online.names}} for r, g in zip(rows, got, strict=True)])
    frame["ts"] = ts
    frame["request_id"] = [f"r{i}" for i in range(len(frame))]
    frame["degraded"] = False
    return frame


def serving_time(root: Path, features: FeaturesConfig) -> pd.Timestamp:
    """A minute after the newest feature row (merchant rows are stamped at the end of their day): serving
    then happens after everything the online store holds, as it does in production."""
    stamps = [pd.read_parquet(p, columns=["event_timestamp"])["event_timestamp"].max()
              for p in (root / features.source_dir).glob("*.parquet")]
    return pd.Timestamp(max(stamps)).tz_convert("UTC") + pd.Timedelta(minutes=1)


def transactions(root: Path, data: DataConfig) -> pd.DataFrame:
    from mlops_features import read_validated

    return read_validated(root / data.validated_dir, record_id=FRAUD_CONTRACT.record_id)


def replay(features: FeaturesConfig, root: Path, log: pd.DataFrame, **kw: Any) -> Any:
    from mlops_monitoring.skew import replay_skew

    return replay_skew(features, root, log, model="fraud", **kw)


def test_clean_replay_reports_no_mismatch(store: tuple[Path, DataConfig, FeaturesConfig]) -> None:
    root, data, features = store
    seen = transactions(root, data)
    ts = serving_time(root, features)
    log = served_log(features, root, seen.sample(150, random_state=1), ts)
    report = replay(features, root, log)
    assert report.rows_compared == 150 and report.mismatch_rate == 0.0, report.examples
    assert all(f.compared == 150 for f in report.features.values())
    assert set(report.features) >= {"user_amount_sum_24h", "merchant_fraud_rate_7d"}


def test_changed_online_transformation_is_named(store: tuple[Path, DataConfig, FeaturesConfig]) -> None:
    root, data, features = store
    seen = transactions(root, data)
    ts = serving_time(root, features)
    log = served_log(features, root, seen.sample(150, random_state=2), ts)
    log["user_amount_sum_24h"] = log["user_amount_sum_24h"] * 100  # the online path now reports cents
    report = replay(features, root, log)
    skew = report.features["user_amount_sum_24h"]
    nonzero = int((log["user_amount_sum_24h"] != 0).sum())
    assert skew.mismatches == nonzero > 0
    assert skew.causes == {"transformation": nonzero}
    assert sum(f.mismatches for n, f in report.features.items() if n != "user_amount_sum_24h") == 0


def test_request_time_feature_is_replayed_and_its_skew_named(store: tuple[Path, DataConfig, FeaturesConfig]) -> None:
    """``fraud_rt_v1`` computes ``amount_zscore_user_7d`` per request (an on-demand view): the replay recomputes it
    offline from the logged amount; equal when served honestly, "transformation" when the online function differs,
    and the stored input's cause when what the function read online was skewed."""
    root, data, features = store
    rt = features.model_copy(update={"feature_service": "fraud_rt_v1"})
    seen = transactions(root, data)
    ts = serving_time(root, rt)
    log = served_log(rt, root, seen.sample(120, random_state=4), ts)
    clean = replay(rt, root, log)
    assert clean.features["amount_zscore_user_7d"].compared == 120
    assert clean.mismatch_rate == 0.0, clean.examples
    # the z-score by hand from the logged row: what the replay's offline recomputation must have agreed with
    known = log["user_amount_std_7d"] > 1e-9
    by_hand = ((log["amount"] - log["user_amount_mean_7d"]) / log["user_amount_std_7d"]).where(known, 0.0)
    assert (log["amount_zscore_user_7d"] - by_hand).abs().max() < 1e-9
    assert (log["amount_zscore_user_7d"] != 0).sum() > 50

    changed = log.copy()
    changed["amount_zscore_user_7d"] = changed["amount_zscore_user_7d"] * 2  # the online function doubled it
    nonzero = int((log["amount_zscore_user_7d"] != 0).sum())
    skew = replay(rt, root, changed).features["amount_zscore_user_7d"]
    assert skew.mismatches == nonzero and skew.causes == {"transformation": nonzero}

    from mlops_features import open_store  # served past the stored view's TTL: the z-score read expired values

    later = ts + open_store(rt, root).get_feature_view("user_transactions").ttl + pd.Timedelta(days=1)
    stale = served_log(rt, root, seen.sample(120, random_state=4), later, looked_up_at=ts)
    z = replay(rt, root, stale).features["amount_zscore_user_7d"]
    assert z.mismatches == int((stale["amount_zscore_user_7d"] != 0).sum()) > 0
    assert z.causes == {"stale_ttl": z.mismatches}  # its input's cause, not "transformation"


def test_value_kept_online_past_its_ttl_is_named(store: tuple[Path, DataConfig, FeaturesConfig]) -> None:
    root, data, features = store
    seen = transactions(root, data)
    from mlops_features import open_store

    ttl = open_store(features, root).get_feature_view("user_transactions").ttl  # declared in feature_repo/
    later = serving_time(root, features) + ttl + pd.Timedelta(days=1)
    # a store that kept the values past their ttl: looked up as of serving_time, logged at `later`
    log = served_log(features, root, seen.sample(100, random_state=3), later, looked_up_at=serving_time(root, features))
    report = replay(features, root, log)
    causes = report.causes()
    assert causes["stale_ttl"] > 0 and sum(causes.values()) == causes["stale_ttl"], causes
    # every value that differs from the default the offline store answers past its TTL is an expired one
    assert report.features["user_amount_sum_7d"].mismatches == int((log["user_amount_sum_7d"] != 0).sum())
    # the platform's lookup applies the ttl itself: served at `later`, it answers the defaults training sees
    honest = replay(features, root, served_log(features, root, seen.sample(100, random_state=3), later))
    assert honest.rows_compared == 100 and honest.mismatch_rate == 0.0, honest.examples


def test_unmaterialized_day_and_unknown_entities_are_named(store: tuple[Path, DataConfig, FeaturesConfig],
                                                           tmp_path: Path) -> None:
    from mlops_features import apply_repo, backfill, generate_transactions, ingest, validate_batches

    src_root, data, _ = store
    root = tmp_path / "copy"
    shutil.copytree(src_root, root)
    features = features_cfg(root)
    # A fresh registry: the copied one describes the original's online tables, and an apply would drop them.
    (root / ".mlops/feast/registry.db").unlink()
    apply_repo(features, root)
    before = transactions(root, data)
    last = pd.to_datetime(before["event_timestamp"], utc=True).max()
    # a new day arrives and is ingested into the offline store, but nobody materializes it
    raw = generate_transactions(root / "data" / "raw_next", rows=1_500, days=1, seed=9,
                                start_date=(last + pd.Timedelta(days=1)).date().isoformat(),
                                users=SMALL["users"] + 60, merchants=SMALL["merchants"])
    validate_batches(raw, data, root, contract=FRAUD_CONTRACT)
    ingest(root / data.validated_dir, root / features.source_dir, record_id=FRAUD_CONTRACT.record_id)
    backfill(features, root)
    after = transactions(root, data)
    new_day = after[pd.to_datetime(after["event_timestamp"], utc=True) > last]
    known = set(before["user_id"].astype(str))
    ts = serving_time(root, features)

    old_users = new_day[new_day["user_id"].astype(str).isin(known)].drop_duplicates("user_id").head(80)
    report = replay(features, root, served_log(features, root, old_users, ts))
    user_causes = {c for n, f in report.features.items() if n.startswith("user_") for c in f.causes}
    assert report.features["user_txn_count_7d"].mismatches > 0
    assert user_causes == {"behind_materialization"}, report.examples[:3]

    new_users = new_day[~new_day["user_id"].astype(str).isin(known)].drop_duplicates("user_id").head(40)
    assert len(new_users) > 5
    report = replay(features, root, served_log(features, root, new_users, ts))
    txn = report.features["user_txn_count_7d"]
    assert txn.mismatches == len(new_users) and txn.causes == {"missing_online": len(new_users)}


def test_metrics_text_and_degraded_rows(store: tuple[Path, DataConfig, FeaturesConfig]) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from mlops_monitoring.skew import skew_metrics_text

    root, data, features = store
    seen = transactions(root, data)
    ts = serving_time(root, features)
    log = served_log(features, root, seen.sample(60, random_state=4), ts)
    log.loc[:9, "degraded"] = True
    log.loc[:9, "user_amount_sum_24h"] = -1.0  # defaults served in an outage are not skew
    log.loc[10:19, "user_amount_sum_24h"] = log.loc[10:19, "user_amount_sum_24h"] + 1.0
    report = replay(features, root, log)
    assert (report.rows_compared, report.rows_degraded) == (50, 10)
    assert report.features["user_amount_sum_24h"].mismatches == 10
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(skew_metrics_text(report)) for s in fam.samples}
    key = ("mlops_skew_mismatch_rate", (("feature", "user_amount_sum_24h"), ("model", "fraud")))
    assert samples[key] == pytest.approx(10 / 50)
    assert samples[("mlops_skew_mismatches", (("cause", "transformation"), ("feature", "user_amount_sum_24h"),
                                              ("model", "fraud")))] == 10
