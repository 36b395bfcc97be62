"""feature_repo/ is a plain Feast repository whose views compute today's 13 features exactly.

The reference values come from the previous implementation (``mlops_features.aggregates`` at fb218c9, kept
verbatim as ``_legacy_aggregates.py``): the port must give identical integers and floats within 1e-12.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import pytest

from mlops_config import DataConfig, FeaturesConfig
from mlops_features import FeatureStoreError, OnlineFeatures, apply_repo, read_validated
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

HERE = Path(__file__).resolve().parent
USER = ("user_txn_count_1h", "user_txn_count_24h", "user_txn_count_7d", "user_amount_sum_1h", "user_amount_sum_24h",
        "user_amount_sum_7d", "user_amount_mean_7d", "user_amount_std_7d", "user_amount_zscore",
        "user_distinct_merchants_24h")
MERCHANT = ("merchant_fraud_rate_7d", "merchant_txn_count_1d", "merchant_amount_mean_7d")
Prepared = tuple[Path, DataConfig, FeaturesConfig]


def _legacy() -> ModuleType:
    spec = importlib.util.spec_from_file_location("legacy_aggregates", HERE / "_legacy_aggregates.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _assert_same(new: pd.DataFrame, old: pd.DataFrame, keys: list[str], names: tuple[str, ...]) -> None:
    new = new.sort_values(keys).reset_index(drop=True)
    old = old.sort_values(keys).reset_index(drop=True)
    assert len(new) == len(old)
    for key in keys:
        assert (new[key].to_numpy() == old[key].to_numpy()).all(), key
    for name in names:
        if np.issubdtype(old[name].dtype, np.integer):
            assert new[name].dtype == np.int64, name
            assert (new[name].to_numpy() == old[name].to_numpy()).all(), name
        else:
            np.testing.assert_allclose(new[name].to_numpy(), old[name].to_numpy(), rtol=0, atol=1e-12, err_msg=name)


def test_the_offline_tables_equal_the_previous_pandas_code(prepared: Prepared) -> None:
    root, data, features = prepared
    legacy = _legacy()
    tx = read_validated(root / data.validated_dir, record_id=FRAUD_CONTRACT.record_id)
    users = pd.read_parquet(root / features.source_dir / "user_transactions.parquet")
    merchants = pd.read_parquet(root / features.source_dir / "merchant_risk.parquet")
    _assert_same(users, legacy.compute_user_features(tx), ["user_id", "event_timestamp"], USER)
    _assert_same(merchants, legacy.compute_merchant_features(tx), ["merchant_id", "event_timestamp"], MERCHANT)


def test_the_online_store_holds_each_entitys_latest_legacy_row(prepared: Prepared) -> None:
    root, data, features = prepared
    legacy = _legacy()
    tx = read_validated(root / data.validated_dir, record_id=FRAUD_CONTRACT.record_id)
    old_users = legacy.compute_user_features(tx).sort_values(["event_timestamp"]).groupby("user_id").tail(1)
    old_merchants = legacy.compute_merchant_features(tx).sort_values("event_timestamp").groupby("merchant_id").tail(1)
    online = OnlineFeatures(features, root, contract=FRAUD_CONTRACT)
    assert online.names == [*USER, *MERCHANT]  # fraud_v1's order, from the registry
    rows = [{"user_id": u, "merchant_id": m} for u, m in
            zip(old_users["user_id"].iloc[:40], old_merchants["merchant_id"].sample(40, replace=True, random_state=0),
                strict=True)]
    got = online.get(rows)
    by_user, by_merchant = old_users.set_index("user_id"), old_merchants.set_index("merchant_id")
    for row, values in zip(rows, got, strict=True):
        for name in USER:
            assert values[name] == pytest.approx(by_user.loc[row["user_id"], name], rel=0, abs=1e-12), name
        for name in MERCHANT:
            assert values[name] == pytest.approx(by_merchant.loc[row["merchant_id"], name], rel=0, abs=1e-12), name


def test_plain_feast_plan_in_the_repo_proposes_no_change_after_apply(tmp_path: Path, make_features: object) -> None:
    root, features = tmp_path, make_features(tmp_path)  # type: ignore[operator]
    apply_repo(features, root)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    res = subprocess.run([str(Path(sys.executable).parent / "feast"), "plan"], cwd=root / features.repo_path,
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "No changes to registry" in res.stdout, res.stdout
    assert "No changes to infrastructure" in res.stdout, res.stdout


def test_a_definition_that_fails_to_import_names_the_file_and_line(tmp_path: Path, make_features: object) -> None:
    features = make_features(tmp_path)  # type: ignore[operator]
    broken = tmp_path / "feature_repo" / "definitions.py"
    text = broken.read_text()
    broken.write_text(text.replace('source=transactions,\n    entities=[merchant]',
                                   'source=transactions,\n    entities=[merchant_typo]'))
    with pytest.raises(FeatureStoreError, match=r"feature_repo/definitions\.py:\d+: NameError: .*merchant_typo"):
        apply_repo(features, tmp_path)
