"""Fixtures of the features tests: config sections pointed at temp folders, one small prepared store."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops_config import DataConfig, FeaturesConfig

REPO_ROOT = Path(__file__).resolve().parents[3]
SMALL = {"rows": 6_000, "days": 3, "users": 300, "merchants": 60}


def features_cfg(root: Path, **over: object) -> FeaturesConfig:
    """The features section with every path under ``root`` and the real feature_repo/ definitions."""
    base = {
        "repo_path": str(REPO_ROOT / "feature_repo"),
        "online_store_path": ".mlops/feast/online.db",
        "registry": ".mlops/feast/registry.db",
        "source_dir": "data/features",
    }
    return FeaturesConfig(**{**base, **over})


@pytest.fixture(scope="session")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, DataConfig, FeaturesConfig]:
    """A small generated → validated → ingested → applied → materialized store on SQLite (once per session)."""
    from mlops_features import prepare_local_data

    root = tmp_path_factory.mktemp("prepared")
    data = DataConfig(**SMALL)
    features = features_cfg(root)
    prepare_local_data(data, features, root, seed=7)
    return root, data, features


@pytest.fixture(scope="session")
def make_features() -> object:
    """``make_features(root, **overrides) -> FeaturesConfig`` (see :func:`features_cfg`)."""
    return features_cfg
