"""The names a deployment gives itself: one ``project.name`` the experiment and Feast project follow, a model and a
FeatureService named in the files (never a default in ``packages/``, #26), each missing one said plainly."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops_config import ConfigError, FeaturesConfig, PlatformConfig, TrackingConfig, load_config


def _load(config_dir: Path, **kw):
    kw.setdefault("environ", {})
    return load_config(config_dir=config_dir, **kw)


def test_experiment_and_feast_project_follow_the_project_name() -> None:
    cfg = PlatformConfig.model_validate({"project": {"name": "churn-risk"}})
    assert (cfg.tracking.experiment, cfg.features.feast_project) == ("churn-risk", "churn_risk")
    built = PlatformConfig(project={"name": "churn-risk"}, tracking=TrackingConfig(uri="sqlite:///x.db"),
                           features=FeaturesConfig(repo_path="repo"))
    assert (built.tracking.experiment, built.features.feast_project) == ("churn-risk", "churn_risk")
    assert (built.tracking.uri, built.features.repo_path) == ("sqlite:///x.db", "repo")


def test_a_set_experiment_or_feast_project_wins_over_the_project_name() -> None:
    cfg = PlatformConfig.model_validate({"project": {"name": "churn-risk"}, "tracking": {"experiment": "exp"},
                                         "features": {"feast_project": "fp"}})
    assert (cfg.tracking.experiment, cfg.features.feast_project) == ("exp", "fp")
    built = PlatformConfig(project={"name": "churn-risk"}, tracking=TrackingConfig(experiment="exp"))
    assert built.tracking.experiment == "exp"


def test_a_file_s_project_name_names_the_experiment_as_a_default(config_dir: Path) -> None:
    base = config_dir / "base.yaml"
    base.write_text(base.read_text().replace("name: fraud-detection", "name: churn-risk"))
    loaded = _load(config_dir)
    assert (loaded.config.tracking.experiment, loaded.config.features.feast_project) == ("churn-risk", "churn_risk")
    assert loaded.sources["tracking.experiment"] == "default"
    assert loaded.sources["project.name"] == "configs/base.yaml"
    llm = _load(config_dir, model="llm-tiny").config
    assert (llm.tracking.experiment, llm.features.feast_project) == ("llm-tiny", "churn_risk")


def test_no_model_named_anywhere_is_refused_naming_the_model_files(config_dir: Path) -> None:
    base = config_dir / "base.yaml"
    base.write_text(base.read_text().replace("  model: fraud\n", ""))
    with pytest.raises(ConfigError, match=r"no model selected: project.model = None .*expected one of "
                                          r"\['fraud', 'llm-sft', 'llm-tiny'\]"):
        _load(config_dir)
    assert _load(config_dir, model="llm-tiny").config.project.model == "llm-tiny"
    assert _load(config_dir, overrides=["project.model=fraud"]).config.project.model == "fraud"


def test_a_bad_key_is_reported_before_a_missing_model(config_dir: Path) -> None:
    (config_dir / "base.yaml").write_text("trainig:\n  lr: 1\n")
    with pytest.raises(ConfigError, match=r"unknown key 'trainig'"):
        _load(config_dir)


def test_a_missing_feature_service_names_what_is_expected() -> None:
    features = FeaturesConfig(repo_path="my_repo")
    assert features.feature_service is None
    with pytest.raises(ConfigError, match=r"features.feature_service is not set \(got None\); expected the name of "
                                          r"the FeatureService .* defined in my_repo/: set features.feature_service"):
        features.require_feature_service()
    assert FeaturesConfig(feature_service="svc_v2").require_feature_service() == "svc_v2"


def test_the_reference_model_s_names_come_from_configs_base_yaml(config_dir: Path) -> None:
    loaded = _load(config_dir)
    cfg = loaded.config
    names = {k: (loaded.sources[k], v) for k, v in (("project.name", cfg.project.name),
                                                    ("project.model", cfg.project.model),
                                                    ("features.feature_service", cfg.features.feature_service))}
    assert names == {"project.name": ("configs/base.yaml", "fraud-detection"),
                     "project.model": ("loader", "fraud"),
                     "features.feature_service": ("configs/base.yaml", "fraud_v1")}
