"""Where a run's data comes from: the prediction-log window, a batch on disk, the reference, delayed labels."""

from __future__ import annotations

import json
import logging
import re
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mlops_config import TrackingConfig
from mlops_core import ProfileError, check_profile
from mlops_monitoring.errors import MonitoringError

log = logging.getLogger(__name__)

PROFILE_ARTIFACT = "reference_profile.json"
_WINDOW = re.compile(r"^(\d+)\s*([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_window(text: str) -> timedelta:
    """``"30m"``, ``"1h"``, ``"7d"`` → a timedelta.

    Raises:
        MonitoringError: not a positive number followed by one of s, m, h, d, w.
    """
    match = _WINDOW.match(text.strip()) if isinstance(text, str) else None
    if match is None or int(match.group(1)) == 0:
        raise MonitoringError(f"window {text!r} is not a duration; expected a positive number and a unit: 30m, 1h, 7d")
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


def read_table(path: Path, what: str) -> pd.DataFrame:
    """Read a parquet file, a folder of parquet files, or a CSV file.

    Raises:
        MonitoringError: the path does not exist, holds no parquet file, or has another suffix.
    """
    if not path.exists():
        raise MonitoringError(f"{what} {str(path)!r} does not exist")
    if path.is_dir():
        parts = sorted(path.rglob("*.parquet"))
        if not parts:
            raise MonitoringError(f"{what} folder {str(path)!r} holds no .parquet file")
        return pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    if path.suffix == ".csv":
        return pd.read_csv(path)
    raise MonitoringError(f"{what} {str(path)!r} has suffix {path.suffix!r}; expected .parquet, .csv or a folder")


def read_log(log_uri: str | Path, model: str, since: datetime | None,
             until: datetime | None = None) -> pd.DataFrame:
    """The prediction log of ``model`` with ``since <= ts <= until``, through ``mlops_serving.read_prediction_log``.

    Only the hour partitions of that window are opened (the store's layout: docs/CONTRACTS.md).

    Raises:
        MonitoringError: the store cannot be read.
    """
    from mlops_serving import PredictionLogError, read_prediction_log

    try:
        return read_prediction_log(log_uri, model, since=since, until=until)
    except PredictionLogError as exc:
        raise MonitoringError(str(exc)) from None


def load_window(
    log_uri: str | Path, model: str, window: str, *, now: datetime | None = None
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The last ``window`` of the prediction log (``ts`` in ``[now - window, now]``), and what it covers."""
    now = now or datetime.now(UTC)
    since = now - parse_window(window)
    frame = read_log(log_uri, model, since, now)
    info = {"source": f"{str(log_uri).rstrip('/')}/model={model}", "window": window, "since": since.isoformat(),
            "until": now.isoformat()}
    return frame, info


def window_source(log_uri: str, model: str, window: str, *, now: datetime | None = None) -> tuple[Any, dict[str, Any]]:
    """The last ``window`` of the prediction log as a :class:`mlops_monitoring.drift_duckdb.TableSource` (its
    parts, the ``ts`` bounds, degraded rows left out) for DuckDB to read in place, and what it covers."""
    from mlops_monitoring.drift_duckdb import TableSource
    from mlops_serving import PredictionLogError, prediction_log_parts

    now = now or datetime.now(UTC)
    since = now - parse_window(window)
    try:
        parts, fs = prediction_log_parts(log_uri, model, since=since, until=now)
    except PredictionLogError as exc:
        raise MonitoringError(str(exc)) from None
    info = {"source": f"{str(log_uri).rstrip('/')}/model={model}", "window": window, "since": since.isoformat(),
            "until": now.isoformat()}
    return TableSource(tuple(parts), filesystem=fs, since=since, until=now, drop_degraded=True), info


def load_reference(path: Path) -> dict[str, Any] | pd.DataFrame:
    """A reference from disk: a profile (``.json``) or reference rows (parquet / CSV / folder)."""
    if path.suffix == ".json":
        if not path.is_file():
            raise MonitoringError(f"reference profile {str(path)!r} does not exist")
        try:
            return check_profile(json.loads(path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, ProfileError) as exc:
            raise MonitoringError(f"reference profile {str(path)!r}: {exc}") from None
    return read_table(path, "reference")


def _version_at(tracking: TrackingConfig, root: Path, model: str, alias: str) -> tuple[Any, str, Any]:
    """The registry client, the registered name and the version ``alias`` points at, which has a run."""
    from mlflow.exceptions import MlflowException

    from mlops_core import mlflow_client, registered_model_name

    name = registered_model_name(tracking, model)
    client = mlflow_client(tracking, root)
    try:
        version = client.get_model_version_by_alias(name, alias)
    except MlflowException as exc:
        raise MonitoringError(
            f"cannot resolve {name!r}@{alias!r} in the registry ({exc.message}); pass --reference PATH instead"
        ) from None
    if not version.run_id:
        raise MonitoringError(f"{name!r} v{version.version} was registered without a run; pass --reference PATH")
    return client, name, version


def fetch_reference_profile(tracking: TrackingConfig, root: Path, model: str, alias: str) -> dict[str, Any]:
    """Download ``reference_profile.json`` from the training run of the version behind ``alias``, with the
    version's ``decision_threshold`` copied from its ``model.json`` (absent when it records none).

    Raises:
        MonitoringError: no such alias, or that run logged no profile.
    """
    from mlflow.exceptions import MlflowException

    from mlops_serving import MODEL_META_ARTIFACT

    client, name, version = _version_at(tracking, root, model, alias)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            local = client.download_artifacts(version.run_id, PROFILE_ARTIFACT, tmp)
        except (MlflowException, OSError) as exc:
            raise MonitoringError(
                f"run {version.run_id} of {name!r} v{version.version} has no {PROFILE_ARTIFACT!r} ({exc}); "
                "training logs it, or pass --reference PATH"
            ) from None
        profile = load_reference(Path(local))
        try:  # the version's own decision threshold, from its model.json (mlops_model.threshold)
            meta = json.loads(Path(client.download_artifacts(version.run_id, MODEL_META_ARTIFACT, tmp)).read_text(
                encoding="utf-8"))
        except (MlflowException, OSError, ValueError) as exc:
            log.warning("run %s of %r v%s: no readable %s (%s): its decision threshold is unknown",
                        version.run_id, name, version.version, MODEL_META_ARTIFACT, exc)
            meta = {}
    assert isinstance(profile, dict)
    profile.setdefault("source", {"model": name, "version": str(version.version), "run_id": version.run_id})
    if isinstance(meta, dict) and meta.get("decision_threshold") is not None:
        profile["decision_threshold"] = meta["decision_threshold"]
    return profile


def sample_from_profile(profile: dict[str, Any], n: int, seed: int) -> pd.DataFrame:
    """Rows drawn from a profile (inverse ECDF for numbers, frequencies for categories), for Evidently's report.

    Only a stand-in for people to look at; verdicts never use it.
    """
    rng = np.random.default_rng(seed)
    columns: dict[str, Any] = {}
    numeric = dict(profile["numeric"])
    if profile.get("score") is not None:
        numeric["score"] = profile["score"]
    for name, col in numeric.items():
        ecdf = np.asarray(col["ecdf"], dtype=np.float64)
        columns[name] = np.interp(rng.random(n), np.linspace(0.0, 1.0, ecdf.shape[0]), ecdf)
    for name, col in profile["categorical"].items():
        cats = list(col["counts"])
        weights = np.asarray([col["counts"][c] for c in cats], dtype=np.float64)
        columns[name] = rng.choice(np.asarray(cats, dtype=object), size=n, p=weights / weights.sum())
    return pd.DataFrame(columns)


TOKENIZER_FILES = frozenset({"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                             "merges.txt", "tokenizer.model", "added_tokens.json", "chat_template.jinja"})
"""The files of a Hugging Face tokenizer folder: all the LM drift source downloads of a served version."""


def fetch_served_tokenizer(tracking: TrackingConfig, root: Path, model: str, alias: str, target: Path
                           ) -> tuple[Path, str]:
    """Download the tokenizer files of the version behind ``alias`` (its run's ``model/`` artifact) into ``target``;
    returns the folder and the version. Only the tokenizer: the weights are not needed to count tokens.

    Raises:
        MonitoringError: no such alias, the version has no run, or its ``model/`` artifact holds no tokenizer.
    """
    from mlflow.exceptions import MlflowException


    client, name, version = _version_at(tracking, root, model, alias)
    try:
        files = [a.path for a in client.list_artifacts(version.run_id, "model")
                 if not a.is_dir and Path(a.path).name in TOKENIZER_FILES]
        if not any(Path(f).name == "tokenizer_config.json" for f in files):
            raise MonitoringError(
                f"run {version.run_id} of {name!r} v{version.version} has no tokenizer under 'model/' (found "
                f"{sorted(Path(f).name for f in files)}); expected the exported Hugging Face folder")
        for artifact in files:
            client.download_artifacts(version.run_id, artifact, str(target))
    except MlflowException as exc:
        raise MonitoringError(f"cannot download the tokenizer of {name!r} v{version.version}: {exc.message}") from None
    return target, str(version.version)  # MLflow downloads a file to target/<its name>
