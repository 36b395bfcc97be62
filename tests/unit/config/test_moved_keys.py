"""Moved and replaced keys are refused at load, from every source, naming where they were set and their new place."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from mlops_config import ConfigError, PlatformConfig, load_config
from mlops_config.loader import _submodel
from mlops_config.moved import MOVED, REPLACED


def _load(config_dir: Path, **kw):
    kw.setdefault("environ", {})
    return load_config(config_dir=config_dir, **kw)


def _field(path: str) -> bool:
    """Whether ``path`` is a key of the schema (a leaf or a subsection)."""
    model: type[BaseModel] | None = PlatformConfig
    for part in path.split("."):
        if model is None or part not in model.model_fields:
            return False
        model = _submodel(model.model_fields[part].annotation)
    return True


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_every_moved_key_is_gone_and_its_new_place_exists(old: str, new: str) -> None:
    assert not _field(old), old
    assert _field(new), new


@pytest.mark.parametrize("old", sorted(REPLACED))
def test_every_replaced_key_is_gone(old: str) -> None:
    assert not _field(old), old


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_a_moved_key_set_with_set_names_its_new_place(config_dir: Path, old: str, new: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(config_dir, overrides=[f"{old}=1"])
    assert str(info.value) == f"{old} has moved to {new} (set in --set)"


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_a_moved_key_set_by_env_names_the_variable(config_dir: Path, old: str, new: str) -> None:
    var = "MLOPS__" + old.upper().replace(".", "__")
    with pytest.raises(ConfigError) as info:
        _load(config_dir, environ={var: "1"})
    assert str(info.value) == f"{old} has moved to {new} (set in env:{var})"


def test_data_max_amount_in_a_profile_names_the_file_and_the_contract(config_dir: Path) -> None:
    local = config_dir / "profiles" / "local.yaml"
    local.write_text(local.read_text() + "data:\n  max_amount: 1000\n")
    with pytest.raises(ConfigError) as info:
        _load(config_dir)
    msg = str(info.value)
    assert msg.startswith("data.max_amount is no longer a key: replaced by the model's declared contract")
    assert "contract.expectations.ranges.amount.max" in msg
    assert msg.endswith("(set in configs/profiles/local.yaml)")


def test_data_max_amount_from_env_and_set(config_dir: Path) -> None:
    env = r"\(set in env:MLOPS__DATA__MAX_AMOUNT\)$"
    with pytest.raises(ConfigError, match=r"data\.max_amount is no longer a key.*" + env):
        _load(config_dir, environ={"MLOPS__DATA__MAX_AMOUNT": "1000"})
    with pytest.raises(ConfigError, match=r"data\.max_amount is no longer a key.*\(set in --set\)$"):
        _load(config_dir, overrides=["data.max_amount=1000"])


def test_a_moved_key_in_a_model_file_names_the_file(config_dir: Path) -> None:
    sft = config_dir / "models" / "llm-sft.yaml"
    sft.write_text(sft.read_text() + "\nserving:\n  llm:\n    max_tokens: 64\n")
    with pytest.raises(ConfigError) as info:
        _load(config_dir, model="llm-sft")
    assert str(info.value) == ("serving.llm.max_tokens has moved to serving.lm.max_tokens "
                               "(set in configs/models/llm-sft.yaml)")


def test_a_key_under_a_moved_subsection_names_its_own_new_path_and_variable(config_dir: Path) -> None:
    var = "MLOPS__DELIVERY__SEQUENTIAL__LM__TTFT_MARGIN"
    with pytest.raises(ConfigError) as info:
        _load(config_dir, environ={var: "0.1"})
    assert str(info.value) == ("delivery.sequential.lm.ttft_margin has moved to delivery.lm.sequential.ttft_margin "
                               f"(set in env:{var})")


def test_the_new_places_load_from_every_source(config_dir: Path) -> None:
    sft = config_dir / "models" / "llm-sft.yaml"
    sft.write_text(sft.read_text() + "\nserving:\n  lm:\n    max_tokens: 64\n")
    cfg = _load(config_dir, model="llm-sft", environ={"MLOPS__EVALUATION__LM__WINDOWS": "7"},
                overrides=["evaluation.tabular.min_slice_rows=11"]).config
    assert (cfg.serving.lm.max_tokens, cfg.evaluation.lm.windows, cfg.evaluation.tabular.min_slice_rows) == (64, 7, 11)
    assert cfg.delivery.lm.sequential.ttft_slow_ms == 2500  # llm-sft.yaml's own, in its new place
