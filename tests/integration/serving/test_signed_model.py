"""Serving verifies the model signature at load: an altered model leaves a real server up but not ready, saying why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration


def _predictor(kit: Any, folder: Path, keys: Path) -> Any:
    from mlops_config import ProvenanceConfig
    from mlops_model import model_verifier
    from mlops_serving.served import ModelRef, load_model
    from mlops_serving.service import create_predictor_app

    check = model_verifier(ProvenanceConfig(local_key_dir=str(keys)), folder)
    return create_predictor_app(kit.serving_config(tabular={"role": "predictor"}), model_name="fraud",
                                loader=lambda: load_model(ModelRef("fraud", "7", folder), check))


def _signed(kit: Any, folder: Path, keys: Path) -> Path:
    from mlops_config import ProvenanceConfig
    from mlops_model import model_signer

    kit.export_model(folder, seed=7)
    model_signer(ProvenanceConfig(local_key_dir=str(keys)), folder)(folder)
    return folder


def test_honest_model_is_ready(tmp_path: Path, kit: Any) -> None:
    folder = _signed(kit, tmp_path / "m", tmp_path / "keys")
    status, body = kit.settled_readiness(_predictor(kit, folder, tmp_path / "keys"), tmp_path)
    assert status == 200, body


@pytest.mark.parametrize(("tamper", "reason"), [
    ("byte", "does not match its signature: changed model.safetensors"),
    ("file", "does not match its signature: added notes.txt"),
    ("key", "signed by another key"),
])
def test_altered_model_is_not_ready_with_the_reason(tmp_path: Path, kit: Any, tamper: str, reason: str) -> None:
    folder = _signed(kit, tmp_path / "m", tmp_path / ("other-keys" if tamper == "key" else "keys"))
    if tamper == "byte":
        data = bytearray((folder / "model.safetensors").read_bytes())
        data[len(data) // 2] ^= 0x10
        (folder / "model.safetensors").write_bytes(bytes(data))
    elif tamper == "file":
        (folder / "notes.txt").write_text("added after signing\n")
    status, body = kit.settled_readiness(_predictor(kit, folder, tmp_path / "keys"), tmp_path)
    assert status == 503
    assert reason in body["reason"] and "'7'" in body["reason"]
