"""Bad feature definitions fail with a clear message naming the file and the object (``mlops features apply``
refuses them before registering anything; ``mlops features plan`` lists them as definition problems).

Each case adds one file to a copy of feature_repo/; the expected texts are written here, not taken from the code.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mlops_config import DataConfig, FeaturesConfig
from mlops_features import FeatureStoreError, apply_repo, plan_features
from mlops_features.checks import definition_problems, object_files
from mlops_features.repo import load_repo
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)

Prepared = tuple[Path, DataConfig, FeaturesConfig]

HEAD = '''
from datetime import timedelta

from feast import Aggregation, BatchFeatureView, FeatureService, FeatureView, Field
from feast.types import Float64, String

from definitions import TTL, transactions, user, user_transactions

FIELDS = [Field(name="user_id", dtype=String), Field(name="amount", dtype=Float64, tags={"default": "0"})]
'''


def _repo_with(make_features: object, tmp_path: Path, body: str) -> tuple[Path, FeaturesConfig]:
    features = make_features(tmp_path)  # type: ignore[operator]
    (tmp_path / "feature_repo" / "bad.py").write_text(HEAD + body)
    return tmp_path, features


def test_the_repository_as_committed_has_no_definition_problem(tmp_path: Path, make_features: object) -> None:
    features = make_features(tmp_path)  # type: ignore[operator]
    assert definition_problems(load_repo(features, tmp_path), object_files(tmp_path / "feature_repo")) == []


@pytest.mark.parametrize(("body", "argument", "line"), [
    ('amount_1h = Aggregation(column="amount", function="sum", time_window="1h")\n', "time_window", 10),
    ('late = FeatureView(name="late", source=transactions, entities=[user], ttl="24h", schema=FIELDS)\n', "ttl", 10),
])
def test_a_window_or_ttl_that_is_not_a_duration_names_the_file_line_and_argument(
        tmp_path: Path, make_features: object, body: str, argument: str, line: int) -> None:
    root, features = _repo_with(make_features, tmp_path, body)
    with pytest.raises(FeatureStoreError) as err:
        apply_repo(features, root)
    expected = f'feature_repo/bad.py:{line}: TypeCheckError: argument "{argument}" (str)'
    assert str(err.value).startswith(expected), err.value
    assert "datetime.timedelta" in str(err.value)


def test_two_views_with_one_name_are_refused(tmp_path: Path, make_features: object) -> None:
    root, features = _repo_with(make_features, tmp_path, (
        'again = FeatureView(name="user_transactions", source=transactions, entities=[user], ttl=TTL, '
        'schema=FIELDS)\n'))
    with pytest.raises(FeatureStoreError, match="two feature views are named 'user_transactions': names must be "
                                                "unique"):
        apply_repo(features, root)


def test_a_feature_service_over_an_undeclared_view_is_refused(tmp_path: Path, make_features: object) -> None:
    root, features = _repo_with(make_features, tmp_path, '''
def _inside_a_function():
    return FeatureView(name="hidden_view", source=transactions, entities=[user], ttl=TTL, schema=FIELDS)


fraud_bad = FeatureService(name="fraud_bad", features=[user_transactions, _inside_a_function()])
''')
    with pytest.raises(FeatureStoreError, match=r"feature_repo/bad\.py: 'fraud_bad': FeatureService reads view "
                                                r"'hidden_view', which the repository does not define at module level"):
        apply_repo(features, root)


def test_a_feature_name_served_twice_is_refused(tmp_path: Path, make_features: object) -> None:
    root, features = _repo_with(make_features, tmp_path, (
        'fraud_twice = FeatureService(name="fraud_twice", features=[user_transactions, user_transactions])\n'))
    with pytest.raises(FeatureStoreError, match=r"feature_repo/bad\.py: 'fraud_twice': feature 'user_txn_count_1h' "
                                                r"comes from both 'user_transactions' and 'user_transactions'"):
        apply_repo(features, root)


def test_a_view_reading_an_unknown_source_column_is_a_plan_problem(prepared: Prepared, tmp_path: Path) -> None:
    src, _, features = prepared
    root = tmp_path / "root"
    shutil.copytree(src, root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "feature_repo" / "bad.py").write_text(HEAD + (
        'typo = FeatureView(name="user_amount_typo", source=transactions, entities=[user], ttl=TTL, schema=[\n'
        '    Field(name="user_id", dtype=String), Field(name="amout", dtype=Float64, tags={"default": "0"})])\n'))
    report = plan_features(features, root, contract=FRAUD_CONTRACT)
    assert any(p.startswith("feature_repo/bad.py: 'user_amount_typo': reads column(s) ['amout'] that its source "
                            "'transactions' does not have") for p in report.problems), report.problems
    assert not report.ok
