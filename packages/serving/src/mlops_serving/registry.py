"""Resolve what to serve: a registry alias becomes one immutable version, downloaded to a local folder."""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlops_config import TrackingConfig
from mlops_core import mlflow_client, registered_model_name
from mlops_model import META_FILE, ThresholdChoice, resolve_threshold
from mlops_serving.errors import ModelLoadError
from mlops_serving.served import ModelRef

log = logging.getLogger(__name__)

MODEL_META_ARTIFACT = "model/model.json"
"""A registered version's ``model.json`` in its training run (training logs the export under ``model/``)."""
COMPLETE_MARK = ".download-complete"
"""Written last into a downloaded version's folder: only folders holding it count as cached."""


def resolve_alias(tracking: TrackingConfig, root: Path, model: str, alias: str, cache_dir: Path) -> ModelRef:
    """Resolve ``alias`` of registered model ``model`` to a version once and download its exported folder.

    Raises:
        ModelLoadError: the registry is unreachable, the alias is not set, or the artifacts have no model.json.
    """
    from mlflow.exceptions import MlflowException

    name = registered_model_name(tracking, model)
    try:
        client = mlflow_client(tracking, root)
        version = client.get_model_version_by_alias(name, alias)
    except MlflowException as exc:
        raise ModelLoadError(
            f"cannot resolve alias {alias!r} of registered model {name!r}: {exc.message}; "
            f"promote a version to {alias!r} first (mlops registry promote)"
        ) from None
    except Exception as exc:  # a down tracking server raises requests/SQLAlchemy errors
        raise ModelLoadError(f"cannot reach the model registry at {tracking.uri!r}: {exc}") from None
    target = cache_dir / name / str(version.version)
    try:
        download_once(client.get_model_version_download_uri(name, version.version), target,
                      tracking_uri=client.tracking_uri)
    except ModelLoadError:
        raise
    except Exception as exc:  # artifact stores raise many types
        raise ModelLoadError(f"cannot download {name!r} version {version.version}: {exc}") from None
    folder = find_exported_folder(target)
    log.info("alias %s of %s resolved to version %s", alias, name, version.version)
    return ModelRef(name=model, version=str(version.version), folder=folder, alias=alias, source="registry")


def download_once(artifact_uri: str, target: Path, *, tracking_uri: str | None = None) -> None:
    """Download ``artifact_uri`` to ``target`` unless a complete download is already there.

    A download lands in a temporary sibling folder, is checked for ``model.json``, marked complete and only
    then renamed into place: an interrupted download (a killed pod, a full disk) never looks cached. A
    ``target`` without the mark (left by an older server, or by hand) is not trusted: it is downloaded again.
    """
    import shutil
    import uuid

    import mlflow

    if (target / COMPLETE_MARK).is_file():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.download-{uuid.uuid4().hex[:8]}"
    try:
        mlflow.artifacts.download_artifacts(artifact_uri=artifact_uri, dst_path=str(tmp), tracking_uri=tracking_uri)
        find_exported_folder(tmp)  # refuses a version without model.json before it is cached
        (tmp / COMPLETE_MARK).write_text(artifact_uri + "\n", encoding="utf-8")
        if target.exists():  # an untrusted leftover; a concurrent complete download wins the race below
            if (target / COMPLETE_MARK).is_file():
                return
            shutil.rmtree(target)
            log.warning("discarded an incomplete model download in %s", target)
        try:
            tmp.rename(target)
        except OSError:  # another process renamed its complete copy into place first
            if not (target / COMPLETE_MARK).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def find_exported_folder(path: Path) -> Path:
    """The folder holding ``model.json`` at or below ``path`` (the exported model's root)."""
    hits = sorted(path.rglob(META_FILE), key=lambda p: len(p.parts))
    if not hits:
        raise ModelLoadError(f"no {META_FILE} under {str(path)!r}; the registered version is not an exported model")
    return hits[0].parent


def version_thresholds(tracking: TrackingConfig, root: Path, model: str, override: float | None, *,
                       override_key: str = "monitoring.decision_threshold") -> Callable[[str], ThresholdChoice]:
    """``version`` → the threshold that version's decisions are scored at: ``override`` when set, else the one
    recorded in its ``model.json`` (fetched once per version from its run), else the legacy 0.5 (an export that
    records none, or a version the registry cannot give, logged as a warning; the choice's note says which)."""
    from mlflow.exceptions import MlflowException

    cache: dict[str, ThresholdChoice] = {}

    def of(version: str) -> ThresholdChoice:
        if version in cache:
            return cache[version]
        meta: dict[str, Any] | None = None
        name = registered_model_name(tracking, model)
        try:  # fetched even under an override, so that a disagreement is named
            client = mlflow_client(tracking, root)
            run_id = client.get_model_version(name, version).run_id
            if not run_id:
                raise OSError(f"v{version} was registered without a run")
            with tempfile.TemporaryDirectory() as tmp:
                meta = json.loads(Path(client.download_artifacts(run_id, MODEL_META_ARTIFACT, tmp)).read_text(
                    encoding="utf-8"))
        except (MlflowException, OSError, ValueError) as exc:
            log.warning("%r v%s: no readable %s (%s): its recorded threshold is unknown", name, version,
                        MODEL_META_ARTIFACT, exc)
        cache[version] = resolve_threshold(meta, override, override_key=override_key, model=f"v{version}")
        return cache[version]

    return of
