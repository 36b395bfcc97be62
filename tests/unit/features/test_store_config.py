"""feature_repo/feature_store*.yaml are fresh renders of each profile's config, and Feast accepts them."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops_config import FeaturesConfig, load_config
from mlops_features import FeatureStoreError, render_feature_store_yaml
from mlops_features.store import redis_connection_string, repo_config_dict

PROFILES = {"local": "feature_store.yaml", "staging": "feature_store.staging.yaml",
            "production": "feature_store.production.yaml"}


@pytest.mark.parametrize("profile", list(PROFILES))
def test_committed_yaml_is_the_render_of_the_profile(repo_root: Path, profile: str) -> None:
    loaded = load_config(profile=profile, check_secrets=False)
    text = render_feature_store_yaml(loaded.config.features, loaded.root, profile)
    committed = (repo_root / "feature_repo" / PROFILES[profile]).read_text()
    assert committed == text, f"run `mlops features render` to refresh feature_repo/{PROFILES[profile]}"


@pytest.mark.parametrize("profile", list(PROFILES))
def test_feast_parses_each_yaml(repo_root: Path, profile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from feast.repo_config import load_repo_config

    monkeypatch.setenv("REDIS_PASSWORD", "r-secret")
    monkeypatch.setenv("FEAST_REGISTRY_PASSWORD", "p-secret")
    cfg = load_repo_config(repo_root / "feature_repo", repo_root / "feature_repo" / PROFILES[profile])
    assert cfg.project == "fraud_detection"
    assert cfg.offline_store.type == "duckdb"
    if profile == "local":
        assert cfg.online_store.type == "sqlite"
        assert Path(cfg.online_store.path) == Path("../.mlops/feast/online.db")
    else:
        assert cfg.online_store.type == "redis"
        assert "password=r-secret" in cfg.online_store.connection_string
        assert cfg.registry.registry_type == "sql"
        assert ":p-secret@" in cfg.registry.path


def test_secrets_never_appear_in_the_rendered_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_PASSWORD", "r-secret")
    cfg = FeaturesConfig(online_store="redis", redis_password_env="REDIS_PASSWORD")
    assert "r-secret" not in render_feature_store_yaml(cfg, "/repo", "x")
    assert "password=${REDIS_PASSWORD}" in redis_connection_string(cfg)


def test_local_paths_are_absolute_under_the_root(tmp_path: Path) -> None:
    raw = repo_config_dict(FeaturesConfig(), tmp_path)
    assert raw["registry"]["path"] == str(tmp_path / ".mlops/feast/registry.db")
    assert raw["online_store"]["path"] == str(tmp_path / ".mlops/feast/online.db")


@pytest.mark.parametrize("url", ["http://x:6379", "redis://", "127.0.0.1:6379"])
def test_bad_redis_url_is_named(url: str) -> None:
    with pytest.raises(FeatureStoreError, match=r"features\.redis_url="):
        redis_connection_string(FeaturesConfig(online_store="redis", redis_url=url))
