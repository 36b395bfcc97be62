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


@pytest.mark.parametrize(("section", "old", "new"), [
    ("serving:\n  redis_outage: unavailable\n", "serving.redis_outage", "serving.tabular.redis_outage"),
    ("serving:\n  shadow:\n    fraction: 0.5\n", "serving.shadow.fraction", "serving.tabular.shadow.fraction"),
    ("delivery:\n  sequential:\n    slow_ms: 250\n", "delivery.sequential.slow_ms",
     "delivery.tabular.sequential.slow_ms"),
    ("delivery:\n  sequential:\n    max_skew_mismatch_rate: 0.01\n", "delivery.sequential.max_skew_mismatch_rate",
     "delivery.tabular.max_skew_mismatch_rate"),
    ("delivery:\n  max_prediction_psi: 0.3\n", "delivery.max_prediction_psi", "delivery.tabular.max_prediction_psi"),
])
def test_a_tabular_key_left_at_section_level_in_a_profile_names_the_file_and_its_new_place(
        config_dir: Path, section: str, old: str, new: str) -> None:
    staging = config_dir / "profiles" / "staging.yaml"
    staging.write_text(staging.read_text() + "\n" + section)
    with pytest.raises(ConfigError) as info:
        _load(config_dir, profile="staging", check_secrets=False)
    assert str(info.value) == f"{old} has moved to {new} (set in configs/profiles/staging.yaml)"


def test_the_tabular_subsections_load_from_every_source(config_dir: Path) -> None:
    local = config_dir / "profiles" / "local.yaml"
    local.write_text(local.read_text() + "\ndelivery:\n  tabular:\n    sequential:\n      score_edges: [0.1, 0.5]\n")
    cfg = _load(config_dir, environ={"MLOPS__SERVING__TABULAR__SHADOW__FRACTION": "0.25",
                                     "MLOPS__SERVING__TABULAR__SHADOW__URL": "candidate:80",
                                     "MLOPS__DELIVERY__TABULAR__MAX_SKEW_MISMATCH_RATE": "0.02"},
                overrides=["serving.tabular.max_inflight=64", "delivery.tabular.latency_metric=my_seconds"]).config
    assert (cfg.serving.tabular.shadow.fraction, cfg.serving.tabular.shadow.url, cfg.serving.tabular.max_inflight) == (
        0.25, "candidate:80", 64)
    assert cfg.delivery.tabular.sequential.score_edges == (0.1, 0.5)
    assert (cfg.delivery.tabular.max_skew_mismatch_rate, cfg.delivery.tabular.latency_metric) == (0.02, "my_seconds")
    with pytest.raises(ConfigError, match="score_edges must strictly increase"):  # validation moved with the key
        _load(config_dir, overrides=["delivery.tabular.sequential.score_edges=[0.5,0.2]"])
