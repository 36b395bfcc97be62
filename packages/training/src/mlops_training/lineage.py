"""MLflow lineage of a training run, written by rank 0 only.

Params + ``config.json`` (resolved config), per-step metrics in ``log_batch`` calls of
``tracking.log_batch_size``, system figures, tags (seed, git commit, data hash, FeatureService version,
torch version, world size, strategy, weights hash), the checkpoint manifest, the reference profile, and the
exported model as artifact ``model/`` registered as a new version with no alias.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlops_config import PlatformConfig, TrackingConfig
from mlops_core import TrackingError, mlflow_client, registered_model_name, start_run

log = logging.getLogger(__name__)


def config_hash(config: PlatformConfig) -> str:
    """SHA-256 of the training section and seed: two runs with the same hash trained the same recipe.

    ``stop_after_steps`` says how far to run, not how to train: a replay of a run's first steps has its hash.
    """
    training = config.training.model_dump(mode="json", exclude={"stop_after_steps"})
    doc = {"seed": config.project.seed, "training": training}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def signature_tags(export_dir: Path) -> dict[str, str]:
    """``mlops.model_digest`` and ``mlops.signature_sha256`` of a signed export (empty when unsigned)."""
    from mlops_model import SIGNATURE_FILE, model_digest

    signature = export_dir / SIGNATURE_FILE
    if not signature.is_file():
        return {}
    return {"mlops.model_digest": model_digest(export_dir),
            "mlops.signature_sha256": hashlib.sha256(signature.read_bytes()).hexdigest()}


@dataclass(frozen=True)
class RecordedRun:
    """The MLflow run and the registry version it created."""

    run_id: str
    model_name: str
    model_version: str
    export_dir: Path


def metric_batches(history: Mapping[str, list[list[float]]], batch_size: int) -> list[list[Any]]:
    """``history`` (name → ``[[step, value], ...]``) as MLflow ``Metric`` lists of at most ``batch_size``."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    metrics = [Metric(key=name, value=float(v), timestamp=now, step=int(s))
               for name, points in sorted(history.items()) for s, v in points]
    return [metrics[i : i + batch_size] for i in range(0, len(metrics), batch_size)]


def record_run(tracking: TrackingConfig, root: Path, *, model: str, run_name: str, seed: int,
               config: Mapping[str, Any], data_hash: str, tags: Mapping[str, str],
               history: Mapping[str, list[list[float]]], system: Mapping[str, float],
               per_rank: Sequence[Mapping[str, float]], artifacts: Mapping[str, Any],
               export: Callable[[str], Path]) -> RecordedRun:
    """Log one finished training run and register its exported model (rank 0 only).

    Args:
        export: called with the MLflow run id; writes the exported model folder and returns it.
        artifacts: JSON documents to log by file name (checkpoint manifest, reference profile).

    Raises:
        TrackingError: the tracking server or registry refused a request.
    """
    import mlflow

    name = registered_model_name(tracking, model)
    with start_run(tracking, root, run_name=run_name, seed=seed, config=config, data_hash=data_hash,
                   tags=tags) as run:
        run_id = run.info.run_id
        client = mlflow_client(tracking, root)
        try:
            for batch in metric_batches(history, tracking.log_batch_size):
                client.log_batch(run_id, metrics=batch)
            figures = {f"system/{k}": float(v) for k, v in system.items()}
            for r, fig in enumerate(per_rank):
                figures.update({f"system/rank{r}/{k}": float(v) for k, v in fig.items()})
            mlflow.log_metrics(figures)
            for file_name, doc in artifacts.items():
                if doc is not None:
                    mlflow.log_dict(doc, file_name)
            export_dir = export(run_id)
            from mlops_model import read_meta

            weights = read_meta(export_dir)["weights_sha256"]
            mlflow.set_tag("mlops.weights_sha256", weights)
            signed = signature_tags(export_dir)
            mlflow.set_tags(signed)
            mlflow.log_artifacts(str(export_dir), "model")
            try:
                client.create_registered_model(name)
            except Exception as exc:  # already exists: MLflow signals it with a RestException
                if "already exists" not in str(exc).lower() and "RESOURCE_ALREADY_EXISTS" not in str(exc):
                    raise
            version = client.create_model_version(
                name, source=f"{run.info.artifact_uri}/model", run_id=run_id,
                tags={"mlops.weights_sha256": weights, "mlops.data_hash": data_hash, **signed,
                      **{k: v for k, v in tags.items() if k == "mlops.feature_service"}},
            )
        except TrackingError:
            raise
        except Exception as exc:
            raise TrackingError(
                f"MLflow refused to record training run {run_name!r} at {tracking.uri!r}: {exc}"
            ) from exc
    log.info("run %s registered %s version %s", run_id, name, version.version)
    return RecordedRun(run_id=run_id, model_name=name, model_version=str(version.version), export_dir=export_dir)
