"""Signed exported models (OpenSSF model-signing, EC keys): an honest model loads; any alteration is refused."""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

import pytest
import torch

from mlops_config import ProvenanceConfig
from mlops_model import (
    SIGNATURE_FILE,
    ExportedModel,
    ModelSignatureError,
    build_tabular_mlp,
    model_signer,
    model_verifier,
    save_exported,
)
from mlops_model.encoder import EncoderSpec, NumericColumn

ARCH = {"input_dim": 2, "hidden_sizes": [3]}


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Key-based signing and verifying must not reach out (no TUF root, no Rekor): any socket fails the test."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("model signing tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)


def _provenance(keys: Path) -> ProvenanceConfig:
    return ProvenanceConfig(local_key_dir=str(keys))


def _export(folder: Path, keys: Path, seed: int = 0) -> Path:
    torch.manual_seed(seed)
    net = build_tabular_mlp(ARCH)
    encoder = EncoderSpec(numeric=(NumericColumn(name="a", mean=0.0, std=1.0, log=False),
                                  NumericColumn(name="b", mean=0.0, std=1.0, log=False)), input_dim=2)
    meta = {"kind": "tabular_mlp", "architecture": ARCH, "features": {"encoder": encoder.to_dict()}}
    return save_exported(folder, net.state_dict(), meta, sign=model_signer(_provenance(keys), folder))


def _load(folder: Path, keys: Path) -> ExportedModel:
    return ExportedModel.load(folder, check=model_verifier(_provenance(keys), folder))


def test_honest_model_loads_and_digest_is_sha256_of_its_file_list(tmp_path: Path) -> None:
    folder = _export(tmp_path / "m", tmp_path / "keys")
    assert sorted(p.name for p in folder.iterdir()) == ["model.json", "model.safetensors", SIGNATURE_FILE]
    model = _load(folder, tmp_path / "keys")
    assert model.input_dim == 2
    lines = sorted(f"{n} {hashlib.sha256((folder / n).read_bytes()).hexdigest()}"
                   for n in ("model.json", "model.safetensors"))
    expected = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    assert model_verifier(_provenance(tmp_path / "keys"), folder)(folder) == expected
    # the local key pair was generated once, private key readable by its owner only
    assert oct((tmp_path / "keys" / "signing-key.pem").stat().st_mode & 0o777) == "0o600"


def test_one_byte_changed_in_the_weights_is_refused_naming_the_file(tmp_path: Path) -> None:
    folder = _export(tmp_path / "m", tmp_path / "keys")
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelSignatureError, match=r"does not match its signature: changed model.safetensors$"):
        _load(folder, tmp_path / "keys")


def test_a_consistent_re_export_swapped_in_is_refused(tmp_path: Path) -> None:
    """Weights and model.json replaced together (weights_sha256 right): only the signature can tell."""
    folder = _export(tmp_path / "m", tmp_path / "keys")
    other = _export(tmp_path / "other", tmp_path / "keys", seed=1)
    for name in ("model.json", "model.safetensors"):
        (folder / name).write_bytes((other / name).read_bytes())
    with pytest.raises(ModelSignatureError,
                       match=r"does not match its signature: changed model\.json, model\.safetensors$"):
        _load(folder, tmp_path / "keys")


def test_an_added_file_is_refused_naming_it(tmp_path: Path) -> None:
    folder = _export(tmp_path / "m", tmp_path / "keys")
    (folder / "extra.py").write_text("print('hi')\n")
    with pytest.raises(ModelSignatureError, match=r"does not match its signature: added extra\.py$"):
        _load(folder, tmp_path / "keys")


def test_a_signature_from_another_key_is_refused(tmp_path: Path) -> None:
    folder = _export(tmp_path / "m", tmp_path / "mallory")  # signed with a key the verifier does not trust
    _load(folder, tmp_path / "mallory")
    with pytest.raises(ModelSignatureError, match=r"does not verify with public key .*signed by another key"):
        _load(folder, tmp_path / "keys")


def test_unsigned_model_is_refused_unless_allowed(tmp_path: Path) -> None:
    folder = _export(tmp_path / "m", tmp_path / "keys")
    (folder / SIGNATURE_FILE).unlink()
    with pytest.raises(ModelSignatureError, match=r"has no model\.sig: the model is unsigned"):
        _load(folder, tmp_path / "keys")
    lenient = ProvenanceConfig(local_key_dir=str(tmp_path / "keys"), require_signature=False)
    assert ExportedModel.load(folder, check=model_verifier(lenient, folder)).input_dim == 2


def test_keys_from_env_vars_and_a_missing_key_file_named(tmp_path: Path) -> None:
    folder = _export(tmp_path / "m", tmp_path / "keys")
    cfg = ProvenanceConfig(public_key_var="PUB", private_key_var="PRIV")
    env = {"PUB": str(tmp_path / "keys" / "signing-key.pub.pem")}
    assert ExportedModel.load(folder, check=model_verifier(cfg, tmp_path, env)).input_dim == 2
    with pytest.raises(ModelSignatureError, match=r"'/nowhere.pem' \(from \$PUB\) does not exist"):
        model_verifier(cfg, tmp_path, {"PUB": "/nowhere.pem"})


def test_key_vars_may_hold_the_pem_text_itself(tmp_path: Path) -> None:
    """CI secrets and Kubernetes secretKeyRef hand over the key's text, not a path: both forms sign and verify."""
    from mlops_model import ensure_local_keys

    private, public = ensure_local_keys(tmp_path / "pair")
    by_text = {"K": private.read_text(), "P": public.read_text()}
    prov = ProvenanceConfig(private_key_var="K", public_key_var="P", local_key_dir=None)
    torch.manual_seed(0)
    net = build_tabular_mlp(ARCH)
    encoder = EncoderSpec(numeric=(NumericColumn(name="a", mean=0.0, std=1.0, log=False),
                                  NumericColumn(name="b", mean=0.0, std=1.0, log=False)), input_dim=2)
    meta = {"kind": "tabular_mlp", "architecture": ARCH, "features": {"encoder": encoder.to_dict()}}
    folder = save_exported(tmp_path / "m", net.state_dict(), meta, sign=model_signer(prov, tmp_path, by_text))
    by_path = {"K": str(private), "P": str(public)}
    assert ExportedModel.load(folder, check=model_verifier(prov, tmp_path, by_path)).input_dim == 2
    assert ExportedModel.load(folder, check=model_verifier(prov, tmp_path, by_text)).input_dim == 2
    other = ensure_local_keys(tmp_path / "other")[1].read_text()  # another key's text: refused
    with pytest.raises(ModelSignatureError):
        ExportedModel.load(folder, check=model_verifier(prov, tmp_path, {"P": other}))


def test_the_publish_marker_of_a_published_copy_is_not_part_of_the_signature(tmp_path: Path) -> None:
    """The storageUri copy carries publish.json (written last by the promotion's publish); it still loads."""
    folder = _export(tmp_path / "m", tmp_path / "keys")
    (folder / "publish.json").write_text('{"files": {}}')
    assert _load(folder, tmp_path / "keys").input_dim == 2
    (folder / "publish.py").write_text("print('not a marker')")  # any other added file is still refused
    with pytest.raises(ModelSignatureError, match=r"publish\.py"):
        _load(folder, tmp_path / "keys")
