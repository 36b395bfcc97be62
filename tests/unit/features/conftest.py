"""Fixtures of the features tests: config sections pointed at temp folders, one small prepared store."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from mlops_config import DataConfig, FeaturesConfig
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from tests.support import sample_as_of

REPO_ROOT = Path(__file__).resolve().parents[3]
SMALL = {"rows": 6_000, "days": 3, "users": 300, "merchants": 60}


def copy_repo(root: Path) -> None:
    """``root/feature_repo``: a copy of the real one (its relative source paths then resolve under ``root``)."""
    shutil.copytree(REPO_ROOT / "feature_repo", root / "feature_repo", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))


def features_cfg(root: Path, *, ttl_days: int | None = None, **over: object) -> FeaturesConfig:
    """The features section with every path under ``root`` and a copy of feature_repo/ in ``root``; ``ttl_days``
    rewrites the copy's ``TTL`` (the views' time-to-live is declared in the repository)."""
    copy_repo(root)
    if ttl_days is not None:
        definitions = root / "feature_repo" / "definitions.py"
        text, n = re.subn(r"^TTL = timedelta\(days=\d+\)$", f"TTL = timedelta(days={ttl_days})",
                          definitions.read_text(), flags=re.MULTILINE)
        assert n == 1, "feature_repo/definitions.py no longer declares `TTL = timedelta(days=...)`"
        definitions.write_text(text)
    base = {
        "repo_path": "feature_repo",
        "feature_service": "fraud_v1",  # configs/base.yaml's
        "feast_project": "fraud_detection",  # the project feature_repo/feature_store.yaml (plain `feast`) names
        "online_store_path": ".mlops/feast/online.db",
        "registry": ".mlops/feast/registry.db",
        "source_dir": "data/features",
        "online_ttl_as_of": sample_as_of(),  # the sample's dates are fixed: serve it as the demo does
    }
    return FeaturesConfig(**{**base, **over})


@pytest.fixture(scope="session")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DataConfig, FeaturesConfig]:
    """A small generated → validated → ingested → applied → materialized store on SQLite (once per session)."""
    from mlops_features import prepare_local_data

    root = tmp_path_factory.mktemp("prepared")
    data = DataConfig(**SMALL)
    features = features_cfg(root)
    prepare_local_data(data, features, root, contract=FRAUD_CONTRACT, seed=7)
    return root, data, features


@pytest.fixture(scope="session")
def make_features() -> object:
    """``make_features(root, **overrides) -> FeaturesConfig`` (see :func:`features_cfg`)."""
    return features_cfg
