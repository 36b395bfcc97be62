"""The Python API other packages call (the evaluation gates, the pipeline): train, and reproduce a hash."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mlops_config import PlatformConfig, load_config, require_data_pin
from mlops_training.launcher import TrainResult, launch
from mlops_training.pretrained import pin_checkpoint_alias


def train_model(config: PlatformConfig, root: Path, *, run_name: str | None = None, track: bool = True,
                timeout_s: float | None = None) -> TrainResult | None:
    """Train ``config`` under torchrun (doctor first), export, and (with ``track``) register a model version.

    Returns ``None`` on a node of a multi-node job that did not host rank 0 (rank 0's node has the result).

    Raises:
        DoctorError, TrainingError, TrackingError; ConfigError: ``delivery.retrain.require_pin`` and no pin;
        DataError: with ``require_pin``, an accepted area that is not exactly the pinned version.
    """
    if track:  # what registers a version trains a pinned one; a re-run that registers nothing replays a record
        pinned = require_data_pin(config.delivery.retrain, root, config.project.model)
        if pinned is not None and config.delivery.retrain.require_pin:
            from mlops_features import check_pinned_data

            check_pinned_data(config.data, root, pinned)
    config = pin_checkpoint_alias(config, root)  # the run records the version an alias names now, not the alias
    return launch(config, root, run_name=run_name, track=track, timeout_s=timeout_s)


def _single_node(result: TrainResult | None) -> TrainResult:
    if result is None:
        from mlops_training.errors import TrainingError

        raise TrainingError("training finished without a result on this node: rank 0 ran on another node")
    return result


def train_tabular(*, model: str, profile: str | None = None, overrides: Iterable[str] = (),
                  config_dir: Path | None = None, run_name: str | None = None, track: bool = True) -> TrainResult:
    """Train a tabular model end to end (FeatureService training set → FSDP → export → MLflow version).

    Args:
        model: The model config (``configs/models/<model>.yaml``), e.g. the reference ``fraud``.

    Returns:
        :class:`TrainResult` with ``run_id``, ``model_version``, ``export_dir``, ``weights_sha256``.
    """
    loaded = load_config(profile=profile, model=model, overrides=list(overrides), config_dir=config_dir)
    return _single_node(train_model(loaded.config, loaded.root, run_name=run_name, track=track))


def reproduce(recorded: PlatformConfig | Mapping[str, Any] | Path, root: Path, *, max_steps: int | None = None,
              run_name: str | None = None) -> TrainResult:
    """Re-run a recorded training (its resolved config: seed, data selection, recipe) without tracking.

    Args:
        recorded: the run's config as a :class:`PlatformConfig`, the ``config.json`` document MLflow holds
            for the run, or a path to that file.
        max_steps: train only this many steps (a short reproducibility check; compare against a run of the
            same length).
    """
    if isinstance(recorded, Path):
        recorded = json.loads(recorded.read_text(encoding="utf-8"))
    config = recorded if isinstance(recorded, PlatformConfig) else PlatformConfig.model_validate(recorded)
    if max_steps is not None:
        config = config.model_copy(update={"training": config.training.model_copy(update={"max_steps": max_steps})})
    # a re-run is compared by weights hash and thrown away: it is not a model anyone serves, so it is not signed
    config = config.model_copy(update={"provenance": config.provenance.model_copy(update={"signer": "none"})})
    name = run_name or f"{config.project.model}-repro-{secrets.token_hex(3)}"
    return _single_node(train_model(config, root, run_name=name, track=False))


def reproduce_weights_hash(recorded: PlatformConfig | Mapping[str, Any] | Path, root: Path, *,
                           max_steps: int | None = None) -> str:
    """``weights_sha256`` of a fresh re-run of a recorded config (see :func:`reproduce`)."""
    return reproduce(recorded, root, max_steps=max_steps).weights_sha256
