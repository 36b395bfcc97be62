"""The data-version pin: one line, the accepted md5; a profile with ``delivery.retrain.require_pin`` refuses to
train without it, the local profile trains as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops_config import ConfigError, RetrainConfig, load_config, parse_data_pin, read_data_pin, require_data_pin

V1 = "1" * 31 + "b.dir"


def test_a_pin_holds_one_data_version() -> None:
    assert parse_data_pin(f"# pinned by retrain/fraud\n{V1}\n", "pin") == V1
    for bad in ("", "latest\n", f"{V1}\n{V1}\n"):
        with pytest.raises(ConfigError, match=r"pin: holds .*; expected one line with the accepted data version"):
            parse_data_pin(bad, "pin")


@pytest.mark.parametrize("profile", ["staging", "production"])
def test_a_cluster_profile_with_require_pin_refuses_to_train_without_a_pin(profile: str, config_dir: Path) -> None:
    from mlops_training import train_model

    loaded = load_config(profile=profile, config_dir=config_dir, environ={}, check_secrets=False)
    retrain = loaded.config.delivery.retrain
    assert retrain.require_pin  # the profile's own setting
    expected = (r"delivery.retrain.require_pin is set and the data-version pin 'configs/models/fraud.data_version' "
                r"is missing .* `mlops retrain request --model fraud --reason data --evidence FILE.json`")
    with pytest.raises(ConfigError, match=expected):
        require_data_pin(retrain, loaded.root, "fraud")
    with pytest.raises(ConfigError, match=expected):  # the training entry checks it before anything starts
        train_model(loaded.config, loaded.root)
    (config_dir / "models" / "fraud.data_version").write_text(V1 + "\n")
    assert require_data_pin(retrain, loaded.root, "fraud") == V1


def test_the_local_profile_trains_without_a_pin(config_dir: Path) -> None:
    loaded = load_config(profile="local", config_dir=config_dir, environ={}, check_secrets=False)
    assert not loaded.config.delivery.retrain.require_pin
    assert require_data_pin(loaded.config.delivery.retrain, loaded.root, "fraud") is None
    assert read_data_pin(RetrainConfig(), loaded.root, "fraud") is None


def test_pin_and_branch_templates_must_name_the_model() -> None:
    with pytest.raises(ValueError, match=r"must contain '\{model\}' so each model has its own, got 'retrain'"):
        RetrainConfig(branch="retrain")
