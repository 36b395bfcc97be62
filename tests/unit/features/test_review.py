"""`mlops features plan`: the review report of a feature change, on the prepared sample store."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mlops_config import DataConfig, FeaturesConfig, TrackingConfig
from mlops_features import plan_features
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

Prepared = tuple[Path, DataConfig, FeaturesConfig]

NEW_VIEW = '''
import pandas as pd
from feast import BatchFeatureView, FeatureService, Field
from feast.types import Float64, String

from definitions import TTL, merchant_risk, transactions, user, user_transactions
from windows import registered


def {fn}(tx: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    df = tx.sort_values(["user_id", "event_timestamp", "transaction_id"], kind="stable").reset_index(drop=True)
    df["event_timestamp"] = pd.to_datetime(df["event_timestamp"], utc=True)
    stamps = df["event_timestamp"]
    {body}
    return pd.DataFrame({{"user_id": df["user_id"], "event_timestamp": stamps, "created": stamps,
                         "{feature}": values}})


UDF, SOURCE = registered({fn})

{view} = BatchFeatureView(
    name="{view}", mode="pandas", source=transactions, entities=[user], ttl=TTL, online=True, offline=False,
    udf=UDF, udf_string=SOURCE,
    schema=[Field(name="user_id", dtype=String), Field(name="{feature}", dtype=Float64, tags={{"default": "0"}})],
)

fraud_v2 = FeatureService(name="fraud_v2", features=[user_transactions, merchant_risk, {view}])
'''
MAX_24H = ('rolled = df.set_index("event_timestamp").groupby("user_id", sort=False)["amount"]'
           '.rolling("24h", closed="both").max()\n    values = rolled.to_numpy()')
# "Fraud in the user's *next* transaction": shift(-1) reads a row stamped after the event.
FUTURE = 'values = df.groupby("user_id")["is_fraud"].shift(-1).fillna(0).to_numpy(dtype=float)'
# The transaction's own label, stamped a microsecond before it: "known" before the transaction it describes.
LABEL = ('values = df["is_fraud"].to_numpy(dtype=float)\n'
         '    stamps = df["event_timestamp"] - pd.Timedelta(microseconds=1)')


def _copy(prepared: Prepared, tmp_path: Path, extra: str | None = None) -> tuple[Path, FeaturesConfig]:
    src, _, features = prepared
    root = tmp_path / "root"
    shutil.copytree(src, root, ignore=shutil.ignore_patterns("__pycache__"))
    if extra is not None:
        (root / "feature_repo" / "new_feature.py").write_text(extra)
    return root, features


def test_a_new_feature_is_reported_with_its_statistics(prepared: Prepared, tmp_path: Path) -> None:
    root, features = _copy(prepared, tmp_path, NEW_VIEW.format(fn="max_udf", body=MAX_24H, feature="amt_max_24h",
                                                               view="user_amount_max"))
    report = plan_features(features, root, contract=FRAUD_CONTRACT)
    assert report.ok, report.to_markdown()
    assert report.changes["user_amount_max"][0].startswith("new view: amt_max_24h (Float64)")
    assert set(report.changes) == {"user_amount_max"}  # fraud_v1's views unchanged
    (stat,) = report.stats
    import pandas as pd

    tx = pd.read_parquet(root / features.source_dir / "transactions.parquet")
    assert stat["feature"] == "amt_max_24h" and stat["nulls"] == 0 and stat["rows"] == len(tx)
    assert stat["max"] == pytest.approx(tx["amount"].max()) and stat["min"] >= tx["amount"].min()
    assert "Created feature view user_amount_max" in report.feast_diff
    # materialized views whose sources differ only in Feast's meta timestamps are not reported as updated
    assert "Updated feature view" not in report.feast_diff, report.feast_diff
    assert "| amt_max_24h | user_amount_max | new |" in report.to_markdown()


def test_a_feature_reading_the_future_is_leakage(prepared: Prepared, tmp_path: Path) -> None:
    root, features = _copy(prepared, tmp_path, NEW_VIEW.format(fn="next_udf", body=FUTURE, feature="next_fraud",
                                                               view="user_next"))
    report = plan_features(features, root, contract=FRAUD_CONTRACT)
    assert not report.ok
    assert any("feature_repo/new_feature.py: 'user_next'" in item and "future" in item for item in report.leakage)


def test_a_feature_that_is_the_label_is_leakage(prepared: Prepared, tmp_path: Path) -> None:
    root, features = _copy(prepared, tmp_path, NEW_VIEW.format(fn="label_udf", body=LABEL, feature="is_fraud_now",
                                                               view="user_label"))
    report = plan_features(features, root, contract=FRAUD_CONTRACT)
    assert not report.ok
    assert any("'user_label'" in item and "'is_fraud_now' alone predicts the label with ROC AUC 1.000" in item
               for item in report.leakage), report.leakage


def test_changing_a_view_a_registered_model_serves_is_breaking(prepared: Prepared, tmp_path: Path) -> None:
    from mlops_core import mlflow_client

    root, features = _copy(prepared, tmp_path)
    definitions = root / "feature_repo" / "definitions.py"
    definitions.write_text(definitions.read_text().replace("TTL = timedelta(days=7)", "TTL = timedelta(days=3)"))
    tracking = TrackingConfig(uri="sqlite:///" + str(tmp_path / "mlflow.db"))
    client = mlflow_client(tracking, root)
    name = f"{tracking.registered_model_prefix}fraud"
    client.create_registered_model(name)
    client.create_model_version(name, source=str(tmp_path), tags={"mlops.feature_service": "fraud_v1"})
    report = plan_features(features, root, tracking=tracking, model="fraud", contract=FRAUD_CONTRACT)
    assert not report.ok
    assert any("'fraud_v1'" in b and "changed view(s) ['merchant_risk', 'user_transactions']" in b
               for b in report.breaking), report.breaking
    assert "ttl changed: 7 days, 0:00:00 → 3 days, 0:00:00" in report.changes["user_transactions"]


def test_a_bad_definition_names_its_file_and_object(prepared: Prepared, tmp_path: Path) -> None:
    bad = NEW_VIEW.format(fn="max_udf", body=MAX_24H, feature="amt_max_24h", view="user_amount_max").replace(
        "features=[user_transactions, merchant_risk, user_amount_max]",
        "features=[user_transactions, user_transactions]")
    root, features = _copy(prepared, tmp_path, bad)
    report = plan_features(features, root, contract=FRAUD_CONTRACT)
    assert any(p.startswith("feature_repo/new_feature.py: 'fraud_v2'") and "name clash" in p
               for p in report.problems), report.problems
    root2, _ = _copy(prepared, tmp_path / "b", NEW_VIEW.format(
        fn="max_udf", body=MAX_24H.replace('["amount"]', '["amount_typo"]'), feature="amt_max_24h",
        view="user_amount_max"))
    report = plan_features(features, root2, contract=FRAUD_CONTRACT)
    assert any("'user_amount_max'" in p and "amount_typo" in p for p in report.problems), report.problems
