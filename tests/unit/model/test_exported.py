"""The exported-model contract: round trip, tamper detection, no pickle, one MLP definition."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mlops_model import ExportedModelError, build_tabular_mlp, load_exported, save_exported, weights_hash


def test_round_trip_and_hash(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = build_tabular_mlp({"input_dim": 5, "hidden_sizes": [4, 3]})
    sd = model.state_dict()
    save_exported(tmp_path, sd, {"kind": "tabular_mlp", "architecture": {"input_dim": 5, "hidden_sizes": [4, 3]}})
    tensors, meta = load_exported(tmp_path)
    assert set(tensors) == set(sd)
    assert all(torch.equal(tensors[k], sd[k]) for k in sd)
    assert meta["weights_sha256"] == weights_hash(sd)
    rebuilt = build_tabular_mlp(meta["architecture"])
    rebuilt.load_state_dict(tensors)
    x = torch.randn(2, 5)
    assert torch.equal(rebuilt(x), model(x))
    # the layer shapes follow the architecture: 5→4→3→1
    assert [tuple(p.shape) for n, p in rebuilt.named_parameters() if n.endswith("weight")] == [(4, 5), (3, 4), (1, 3)]
    assert not any(p.suffix in {".pt", ".pkl", ".bin"} for p in tmp_path.iterdir())


def test_hash_sees_a_single_bit(tmp_path: Path) -> None:
    a = {"w": torch.zeros(3)}
    b = {"w": torch.tensor([0.0, 0.0, 1e-45])}
    assert weights_hash(a) != weights_hash(b)
    assert weights_hash(a) == weights_hash({"w": torch.zeros(3)})


def test_tampered_weights_are_refused(tmp_path: Path) -> None:
    save_exported(tmp_path, {"w": torch.ones(2)}, {"kind": "tabular_mlp", "architecture": {}})
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ExportedModelError, match="does not match weights_sha256"):
        load_exported(tmp_path)


def test_missing_and_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ExportedModelError, match="missing"):
        load_exported(tmp_path)
    (tmp_path / "model.json").write_text(json.dumps({"format_version": 99}))
    with pytest.raises(ExportedModelError, match="format_version 99"):
        load_exported(tmp_path)
    with pytest.raises(ExportedModelError, match="input_dim"):
        build_tabular_mlp({"hidden_sizes": [2]})
