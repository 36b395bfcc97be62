"""The language-model server verifies the model signature at load, as the tabular one does: an altered Hugging
Face folder (one byte of the weights, a file added, a signature by another key) leaves a real server up but not
ready, saying why; the honest folder is ready."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.integration



@pytest.fixture(scope="module")
def checkpoint(base_checkpoint: Path) -> Path:
    return base_checkpoint


def _signed(checkpoint: Path, folder: Path, keys: Path) -> Path:
    from mlops_config import ProvenanceConfig
    from mlops_model import model_signer

    shutil.copytree(checkpoint, folder)
    model_signer(ProvenanceConfig(local_key_dir=str(keys)), folder)(folder)
    return folder


def _readiness(kit: Any, folder: Path, keys: Path, tmp: Path) -> tuple[int, dict[str, Any]]:
    from mlops_config import ProvenanceConfig
    from mlops_model import model_verifier
    from mlops_serving import create_lm_app

    check = model_verifier(ProvenanceConfig(local_key_dir=str(keys)), folder)
    app = create_lm_app(kit.serving_config(tabular={"role": "predictor"}), model_name="llm-sft", folder=folder,
                        version="7", log_dir=None, check=check)
    srv = kit.start_server(app, tmp, wait_ready=False)
    try:
        deadline = time.monotonic() + 60
        r = httpx.get(f"{srv.url}/v2/health/ready")
        while r.status_code != 200 and "not loaded yet" in r.text and time.monotonic() < deadline:
            time.sleep(0.1)
            r = httpx.get(f"{srv.url}/v2/health/ready")
        return r.status_code, r.json()
    finally:
        srv.stop()


def test_honest_language_model_is_ready(tmp_path: Path, kit: Any, checkpoint: Path) -> None:
    folder = _signed(checkpoint, tmp_path / "m", tmp_path / "keys")
    status, body = _readiness(kit, folder, tmp_path / "keys", tmp_path)
    assert status == 200, body


@pytest.mark.parametrize(("tamper", "reason"), [
    ("byte", "does not match its signature: changed model.safetensors"),
    ("file", "does not match its signature: added notes.txt"),
    ("key", "signed by another key"),
])
def test_altered_language_model_is_not_ready_with_the_reason(tmp_path: Path, kit: Any, checkpoint: Path,
                                                             tamper: str, reason: str) -> None:
    folder = _signed(checkpoint, tmp_path / "m", tmp_path / ("other-keys" if tamper == "key" else "keys"))
    if tamper == "byte":
        data = bytearray((folder / "model.safetensors").read_bytes())
        data[len(data) // 2] ^= 0x10
        (folder / "model.safetensors").write_bytes(bytes(data))
    elif tamper == "file":
        (folder / "notes.txt").write_text("added after signing\n")
    status, body = _readiness(kit, folder, tmp_path / "keys", tmp_path)
    assert status == 503, body
    assert reason in body["reason"] and "'7'" in body["reason"] and "llm-sft" in body["reason"]
