"""``serve()`` looks the server up by the kind of what it serves; a kind without a server is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mlops_config import FeaturesConfig, ServingConfig, TrackingConfig
from mlops_model import DEFAULT_CONTRACT as FRAUD_CONTRACT  # fraud's (configs/models/fraud.yaml)
from mlops_model import ModelKind, ModelKindError, save_exported
from mlops_serving import ServingError, serve
from mlops_serving.service import SERVERS


def test_each_served_family_has_a_server_and_the_byte_lm_none() -> None:
    assert set(SERVERS) == {ModelKind.TABULAR, ModelKind.HF_CAUSAL_LM}


def test_a_folder_of_a_kind_without_a_server_is_refused_naming_it(tmp_path: Path) -> None:
    """The folder's own kind wins over the configured one: a byte-level LM export has no server."""
    folder = save_exported(tmp_path / "lm", {"w": torch.zeros(2)}, {"kind": "causal_lm", "architecture": {}})
    with pytest.raises(
        ServingError,
        match=r"'fraud' is a 'causal_lm' model, which has no server; servers exist "
        r"for \['tabular_mlp', 'hf_causal_lm'\]",
    ):
        serve(ServingConfig(), FeaturesConfig(), TrackingConfig(), tmp_path, "fraud", model_dir=folder,
              contract=FRAUD_CONTRACT)


def test_a_configured_kind_without_a_server_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ServingError, match=r"'llm-tiny' is a 'causal_lm' model, which has no server"):
        serve(ServingConfig(), FeaturesConfig(), TrackingConfig(), tmp_path, "llm-tiny", kind=ModelKind.BYTE_LM,
              contract=None)


def test_a_folder_of_an_unknown_kind_is_refused_naming_it(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.json").write_text('{"kind": "gbdt"}', encoding="utf-8")
    with pytest.raises(ModelKindError, match=r"'gbdt' is not a known model kind; expected one of"):
        serve(ServingConfig(), FeaturesConfig(), TrackingConfig(), tmp_path, "fraud", model_dir=folder,
              contract=FRAUD_CONTRACT)


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (
            {"model_dir": Path("models:/fraud@champion")},
            r"--model-dir 'models:/fraud@champion' is a registry URI; "
            r"pass it as --model-uri",
        ),
        (
            {"model_uri": "/srv/models/3"},
            r"--model-uri '/srv/models/3' is not a registry URI "
            r"models:/<name>@<alias>; pass an exported model folder as --model-dir",
        ),
        ({"model_dir": Path("/srv/models/3"), "model_uri": "models:/fraud@champion"}, r"both name the model"),
    ],
    ids=["uri-as-dir", "folder-as-uri", "both"],
)
def test_a_folder_and_a_registry_uri_each_have_their_flag(tmp_path: Path, where: dict, message: str) -> None:
    with pytest.raises(ServingError, match=message):
        serve(ServingConfig(), FeaturesConfig(), TrackingConfig(), tmp_path, "fraud", **where, contract=FRAUD_CONTRACT)


def test_a_canary_with_a_registry_uri_names_the_flag(tmp_path: Path) -> None:
    cfg = ServingConfig(canary_alias="canary", canary_percent=10)
    with pytest.raises(ServingError, match=r"cannot be used with --model-uri"):
        serve(cfg, FeaturesConfig(), TrackingConfig(), tmp_path, "fraud", model_uri="models:/fraud@champion",
              contract=FRAUD_CONTRACT)


def test_a_tabular_model_without_a_declared_contract_is_refused_naming_its_config(tmp_path: Path) -> None:
    """No model's contract stands in for one the config does not declare (the online store is read by its keys)."""
    with pytest.raises(ServingError, match=r"serving tabular model 'churn' needs the model config's contract .* "
                                           r"expected a section contract in configs/models/churn.yaml"):
        serve(ServingConfig(), FeaturesConfig(), TrackingConfig(), tmp_path, "churn", model_dir=tmp_path / "absent",
              contract=None)
    with pytest.raises(TypeError, match="contract"):
        serve(ServingConfig(), FeaturesConfig(), TrackingConfig(), tmp_path, "churn")  # type: ignore[call-arg]
