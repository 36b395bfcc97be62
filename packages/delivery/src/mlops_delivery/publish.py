"""Publishing a registry version's exported model to its immutable ``storageUri`` before an overlay names it.

KServe's storage initializer downloads ``spec.predictor.model.storageUri``; MLflow keeps the exported model
under its run's artifact path (``model/``). So a promotion first copies that folder to
``delivery.storage_uri_template``'s URI (any fsspec URL: ``s3://``, ``gs://``, a local folder), then edits
the overlay. The target is immutable: files go up first, ``publish.json`` (each file's SHA-256) last, so a
target without it is a partial upload; a target whose files differ from the version's is refused, never
overwritten. After the upload every file is read back and hashed, and the weights are loaded from the read-back
copy and hashed as :func:`mlops_model.weights_hash` does, which must equal the registry version's
``mlops.weights_sha256`` tag: the URI the overlay names then holds exactly the version the gates passed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlops_config import TrackingConfig
from mlops_delivery.errors import DeliveryError

logger = logging.getLogger(__name__)

MARKER = "publish.json"
MODEL_ARTIFACT = "model"
WEIGHTS_TAG = "mlops.weights_sha256"


class PublishError(DeliveryError):
    """A model could not be published to, or verified at, its storage URI; or the URI holds other content."""


@dataclass(frozen=True)
class Published:
    """Where a version's model now lives and what was checked."""

    uri: str
    model: str
    version: int
    weights_sha256: str
    files: dict[str, str]
    uploaded: bool
    """``False`` when the URI already held exactly this version (an idempotent re-publish)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form."""
        return {"uri": self.uri, "model": self.model, "version": self.version, "weights_sha256": self.weights_sha256,
                "files": self.files, "uploaded": self.uploaded}


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sha256_file(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def download_version(tracking: TrackingConfig, root: Path, model: str, version: int, dest: Path) -> tuple[Path, str]:
    """Download registry ``version``'s exported folder (its run's ``model/`` artifact) into ``dest``.

    Returns:
        The local folder and the version's ``mlops.weights_sha256`` tag.
    """
    from mlops_core import mlflow_client, registered_model_name

    client = mlflow_client(tracking, root)
    name = registered_model_name(tracking, model)
    try:
        mv = client.get_model_version(name, str(version))
    except Exception as exc:  # MLflow raises several types for a missing version or an unreachable server
        raise PublishError(f"cannot read {name!r} version {version!r} from the registry: {exc}") from None
    expected = (mv.tags or {}).get(WEIGHTS_TAG)
    if not expected:
        raise PublishError(f"{name!r} version {version} has no {WEIGHTS_TAG!r} tag; only versions registered by "
                           f"training (which tags the exported weights' hash) can be published")
    if not mv.run_id:
        raise PublishError(f"{name!r} version {version} has no run; expected the training run's {MODEL_ARTIFACT}/")
    local = Path(client.download_artifacts(mv.run_id, MODEL_ARTIFACT, str(dest)))
    return local, expected


def publish_folder(folder: Path, uri: str, *, expected_weights_sha256: str, model: str = "", version: int = 0
                   ) -> Published:
    """Copy an exported-model folder to ``uri`` (immutable) and verify it there by hash.

    Raises:
        PublishError: the folder's weights do not match ``expected_weights_sha256``, the target holds different
            or partial content, or the read-back copy does not verify.
    """
    import fsspec

    from mlops_model import load_exported

    _, meta = load_exported(folder, verify=True)
    if meta.get("weights_sha256") != expected_weights_sha256:
        raise PublishError(f"exported model in {str(folder)!r} has weights_sha256 {meta.get('weights_sha256')!r}, "
                           f"but the registry version says {expected_weights_sha256!r}; refusing to publish it")
    files = {p.name: _sha256_file(p) for p in sorted(folder.iterdir()) if p.is_file()}
    fs, base = fsspec.core.url_to_fs(uri)
    base = base.rstrip("/")
    uploaded = _upload(fs, base, uri, folder, files)
    weights = _verify(fs, base, uri, files)
    if weights != expected_weights_sha256:
        raise PublishError(f"the weights read back from {uri!r} hash to {weights!r}, expected "
                           f"{expected_weights_sha256!r}: the upload is corrupt")
    logger.info("%s %s v%s at %s (weights %s)", "published" if uploaded else "already published", model, version,
                uri, weights[:12])
    return Published(uri=uri, model=model, version=version, weights_sha256=weights, files=files, uploaded=uploaded)


def _upload(fs: Any, base: str, uri: str, folder: Path, files: dict[str, str]) -> bool:
    """Upload unless the target already holds exactly ``files``; refuse any other content there."""
    marker = f"{base}/{MARKER}"
    if fs.exists(marker):
        recorded = json.loads(fs.cat_file(marker))
        if recorded.get("files") != files:
            raise PublishError(f"{uri!r} already holds a different model (its {MARKER} lists "
                               f"{recorded.get('files')!r}, this version has {files!r}); published URIs are "
                               f"immutable: use a new version")
        return False
    if fs.exists(base) and fs.ls(base, detail=False):
        present = sorted(Path(str(p)).name for p in fs.ls(base, detail=False))
        raise PublishError(f"{uri!r} holds {present!r} but no {MARKER}: a partial or foreign upload; check and delete "
                           f"it by hand before publishing (an immutable URI is never overwritten automatically)")
    fs.makedirs(base, exist_ok=True)
    for name in files:
        fs.put_file(str(folder / name), f"{base}/{name}")
    # Written last: its presence means every file above is complete.
    fs.pipe_file(marker, json.dumps({"files": files}, indent=2, sort_keys=True).encode())
    return True


def _verify(fs: Any, base: str, uri: str, files: dict[str, str]) -> str:
    """Read every file back, check its SHA-256, and return the weights hash of the read-back model."""
    from mlops_model import ExportedModelError, load_exported

    with tempfile.TemporaryDirectory(prefix="mlops-publish-verify-") as tmp:
        for name, expected in files.items():
            data = fs.cat_file(f"{base}/{name}")
            if _sha256_bytes(data) != expected:
                raise PublishError(f"{uri}/{name} does not match its SHA-256 {expected}: the target was altered")
            (Path(tmp) / name).write_bytes(data)
        try:
            _, meta = load_exported(tmp, verify=True)
        except ExportedModelError as exc:
            raise PublishError(f"the model at {uri!r} does not verify: {exc}") from None
    return str(meta["weights_sha256"])


def publish_model(tracking: TrackingConfig, root: Path, model: str, version: int, uri: str) -> Published:
    """Publish registry ``version`` of ``model`` to ``uri`` (immutable, verified by hash); the rehearsal calls it.

    ``uri`` is normally ``storage_uri(delivery.storage_uri_template, model, version)``; a re-publish of the same
    version is a verified no-op.
    """
    with tempfile.TemporaryDirectory(prefix="mlops-publish-") as tmp:
        folder, expected = download_version(tracking, root, model, version, Path(tmp))
        return publish_folder(folder, uri, expected_weights_sha256=expected, model=model, version=version)
