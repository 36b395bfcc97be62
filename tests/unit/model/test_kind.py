"""``kind_of``: one discriminator for the model family, from a training section, an export's meta or its folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops_config import load_config
from mlops_model import ExportedModel, ExportedModelError, ModelKind, ModelKindError, kind_of, save_exported

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("model", "kind"),
    [("fraud", ModelKind.TABULAR), ("llm-tiny", ModelKind.BYTE_LM), ("llm-sft", ModelKind.HF_CAUSAL_LM)],
)
def test_training_section_of_each_shipped_model(model: str, kind: ModelKind) -> None:
    """The shipped model configs: fraud is tabular, llm-tiny trains bytes, llm-sft fine-tunes a checkpoint."""
    cfg = load_config("local", model, config_dir=REPO / "configs").config
    assert kind_of(cfg.training) is kind


@pytest.mark.parametrize("kind", list(ModelKind))
def test_meta_kind_round_trips(kind: ModelKind) -> None:
    assert kind_of({"kind": kind.value}) is kind


def test_unknown_kind_names_it_and_the_known_ones() -> None:
    with pytest.raises(
        ModelKindError,
        match=r"'xgboost' is not a known model kind; expected one of "
        r"\['tabular_mlp', 'causal_lm', 'hf_causal_lm'\]",
    ):
        kind_of({"kind": "xgboost"})
    with pytest.raises(ModelKindError, match=r"None is not a known model kind"):
        kind_of({"architecture": {}})


def test_folder_reads_model_json_or_a_bare_checkpoint(tmp_path: Path) -> None:
    import torch

    exported = save_exported(tmp_path / "lm", {"w": torch.zeros(2)}, {"kind": "causal_lm", "architecture": {}})
    assert kind_of(exported) is ModelKind.BYTE_LM
    bare = tmp_path / "hf"
    bare.mkdir()
    (bare / "config.json").write_text("{}", encoding="utf-8")
    assert kind_of(bare) is ModelKind.HF_CAUSAL_LM
    with pytest.raises(ModelKindError, match=r"holds neither model.json .* nor config.json"):
        kind_of(tmp_path / "empty")
    (bare / "model.json").write_text('{"kind": "gbdt"}', encoding="utf-8")
    with pytest.raises(ModelKindError, match=r"'gbdt' is not a known model kind"):
        kind_of(bare)


def test_tabular_loader_refuses_another_kind(tmp_path: Path) -> None:
    import torch

    folder = save_exported(tmp_path / "lm", {"w": torch.zeros(2)}, {"kind": "causal_lm", "architecture": {}})
    with pytest.raises(ExportedModelError, match=r"holds a model of kind 'causal_lm'; expected 'tabular_mlp'"):
        ExportedModel.load(folder)
