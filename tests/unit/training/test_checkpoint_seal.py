"""A checkpoint's manifest is sealed with the run's signing key: whoever can write the checkpoint folder can swap
DCP's ``.metadata`` (a pickle) and rewrite the manifest's checksum, but not the seal, so a resume refuses it
before anything is unpickled. Real DCP save/load in a one-process gloo group; a real P-256 key pair."""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlops_model import ManifestSeal
from mlops_model.signing import SigningKeys, ensure_local_keys
from mlops_training import CheckpointError
from mlops_training.checkpoint import SEAL, Checkpointer, latest_checkpoint

torch = pytest.importorskip("torch")


@pytest.fixture
def dist_info(tmp_path: Path) -> Iterator[Any]:
    import torch.distributed as dist

    from mlops_training.parallelize import Dist

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        yield Dist(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"), backend="gloo")
    finally:
        dist.destroy_process_group()


def _seal(folder: Path) -> ManifestSeal:
    private, public = ensure_local_keys(folder)
    return ManifestSeal(SigningKeys(private, public))


def _saved(run: Path, dist_info: Any, seal: ManifestSeal | None) -> tuple[Checkpointer, Path]:
    model = torch.nn.Linear(3, 2)
    ckpt = Checkpointer(run, dist_info, keep_last=2, async_save=False, describe={"run_name": "t"}, seal=seal)
    ckpt.save(4, model, torch.optim.AdamW(model.parameters()), {"step": 4})
    path = latest_checkpoint(run)
    assert path is not None
    return ckpt, path


class _Payload:
    """Unpickling it creates ``marker``: the stand-in for code an attacker runs in the training pod."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return open, (str(self.marker), "w")


def _swap_metadata(path: Path, marker: Path) -> None:
    """What an attacker with write access to the checkpoint store does: a new .metadata, the manifest rewritten."""
    (path / ".metadata").write_bytes(pickle.dumps(_Payload(marker)))
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"][".metadata"] = hashlib.sha256((path / ".metadata").read_bytes()).hexdigest()
    (path / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))


def _load(ckpt: Checkpointer, path: Path) -> dict[str, object]:
    model = torch.nn.Linear(3, 2)
    return ckpt.load(path, model, torch.optim.AdamW(model.parameters()))


def test_a_sealed_checkpoint_resumes(tmp_path: Path, dist_info: Any) -> None:
    ckpt, path = _saved(tmp_path / "run", dist_info, _seal(tmp_path / "keys"))
    assert (path / SEAL).is_file()
    assert SEAL not in json.loads((path / "manifest.json").read_text())["files"]
    assert _load(ckpt, path)["step"] == 4


def test_a_swapped_metadata_with_a_rewritten_manifest_is_refused_before_unpickling(
    tmp_path: Path, dist_info: Any
) -> None:
    ckpt, path = _saved(tmp_path / "run", dist_info, _seal(tmp_path / "keys"))
    marker = tmp_path / "unpickled"
    _swap_metadata(path, marker)
    with pytest.raises(CheckpointError, match="does not verify with the run's signing key"):
        _load(ckpt, path)
    assert not marker.exists(), "the swapped .metadata was unpickled"


def test_a_removed_seal_or_another_keys_seal_is_refused(tmp_path: Path, dist_info: Any) -> None:
    ckpt, path = _saved(tmp_path / "run", dist_info, _seal(tmp_path / "keys"))
    other = _seal(tmp_path / "other-keys")
    (path / SEAL).write_bytes(other.sign((path / "manifest.json").read_bytes()))
    with pytest.raises(CheckpointError, match="does not verify"):
        _load(ckpt, path)
    (path / SEAL).unlink()
    with pytest.raises(CheckpointError, match=r"has no manifest\.sig"):
        _load(ckpt, path)


def test_the_attack_is_real_without_a_seal(tmp_path: Path, dist_info: Any) -> None:
    """The same swap against an unsealed checkpoint (``signer: none``) passes the checksums and is unpickled: the
    seal, not the manifest, is what stops it."""
    ckpt, path = _saved(tmp_path / "run", dist_info, None)
    marker = tmp_path / "unpickled"
    _swap_metadata(path, marker)
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException

    with pytest.raises(CheckpointException):  # DCP fails on the payload's return value, after unpickling it
        _load(ckpt, path)
    assert marker.exists()
