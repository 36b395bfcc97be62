"""The fraud model's data: the FeatureService training set from :mod:`mlops_features`, split by time,
encoded with the one shared encoder, cached as ``.npy`` files (no pickle) for every rank to read.

Rank 0 prepares once per run (Feast's point-in-time join is not repeated per rank or per restart).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlops_model import EncoderSpec, contract_meta
from mlops_training.errors import TrainingError

if TYPE_CHECKING:
    import pandas as pd

    from mlops_config import ContractConfig, DataConfig, FeaturesConfig

log = logging.getLogger(__name__)

_ARRAYS = ("train_x", "train_y", "val_x", "val_y")


@dataclass(frozen=True)
class TabularData:
    """Encoded train/validation arrays and what the exported model records about them."""

    train_x: np.ndarray
    train_y: np.ndarray
    val_x: np.ndarray
    val_y: np.ndarray
    encoder: dict[str, Any]
    feature_service: str
    data_hash: str
    frame_path: Path
    """Parquet of the training rows (raw columns), for the reference profile."""
    data_version: str = ""
    """``mlops_features.data_version``: SHA-256 of the validated data area the training set came from."""
    data_lineage: dict[str, Any] | None = None
    """``mlops_features.data_lineage`` of the DVC-tracked folders the training set was built from."""
    contract: dict[str, Any] | None = None
    """The contract the set was prepared under (``ContractConfig`` as JSON), recorded in the export's
    ``model.json`` so serving validates requests by it; ``None`` for a cache written before it was kept."""


def frame_hash(df: pd.DataFrame) -> str:
    """SHA-256 of a frame's content (column names, row order and values)."""
    import pandas as pd

    digest = hashlib.sha256("|".join(map(str, df.columns)).encode())
    digest.update(pd.util.hash_pandas_object(df, index=False).to_numpy().tobytes())
    return digest.hexdigest()


def split_by_time(df: pd.DataFrame, val_fraction: float, *, record_id: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Oldest rows train, newest ``val_fraction`` validate (ties broken by ``record_id``, the contract's, when
    present)."""
    from mlops_features import order_by_time

    if not 0 < val_fraction < 1:
        raise TrainingError(f"val_fraction {val_fraction!r} must be between 0 and 1 (exclusive)")
    ordered = order_by_time(df, record_id=record_id)  # the holdout cut's order: one definition of "by time"
    cut = int(len(ordered) * (1 - val_fraction))
    return ordered.iloc[:cut].reset_index(drop=True), ordered.iloc[cut:].reset_index(drop=True)


def calibration_rows(val_rows: int) -> int:
    """Rows of the time-ordered validation split the calibrator is fitted on: its older half (the newer half
    measures what calibration changed, on rows it never saw)."""
    return val_rows // 2


def check_calibration_split(val_y: Any, method: str) -> None:
    """Refuse, before any training step, a calibration that cannot be fitted: ``method`` (``training.calibration``)
    needs both classes in the older half of the validation split (:func:`calibration_rows`).

    Raises:
        TrainingError: that half holds no positive or no negative; names the counts, the key and the fixes.
    """
    if method == "none":
        return
    y = np.asarray(val_y).ravel()
    held = y[:calibration_rows(len(y))]
    positive = int((held == 1).sum())
    negative = len(held) - positive
    if positive and negative:
        return
    raise TrainingError(
        f"training.calibration={method!r} is fitted on the older half of the validation split, and that half "
        f"({len(held)} of {len(y)} validation rows) holds {positive} positive and {negative} negative rows; it needs "
        "both classes. Give the run more data (data.rows, or a longer time range) or set training.calibration: none")


def prepare_tabular(features: FeaturesConfig, data: DataConfig, root: Path, cache: Path,
                    *, contract: ContractConfig, val_fraction: float = 0.2) -> None:
    """Build the training set through ``mlops_features``, fit the encoder on the train split, write the cache.

    ``contract`` names the label and the encoder's request fields, log-scaled and derived columns.

    Raises:
        TrainingError: ``mlops_features`` is not installed or the training set is empty / has no label.
    """
    try:
        from mlops_features import data_lineage, data_version, training_set
    except ImportError as exc:
        raise TrainingError(
            f"the tabular model needs mlops_features (training_set, data_version, data_lineage): {exc}; "
            "install packages/features (make setup)"
        ) from None
    df = training_set(features, data, root, contract=contract)
    label = contract.label
    if label not in df.columns or len(df) == 0:
        raise TrainingError(
            f"training set from FeatureService {features.feature_service!r} has {len(df)} rows and columns "
            f"{list(df.columns)!r}; expected labelled rows with {label!r} (run `mlops data generate` first?)"
        )
    train, val = split_by_time(df, val_fraction, record_id=contract.record_id)
    spec = EncoderSpec.fit(train, contract=contract)
    encoder = spec.to_dict()
    cache.mkdir(parents=True, exist_ok=True)
    arrays = {"train_x": spec.encode_frame(train), "train_y": train[label].to_numpy(np.float32),
              "val_x": spec.encode_frame(val), "val_y": val[label].to_numpy(np.float32)}
    for name, arr in arrays.items():
        np.save(cache / f"{name}.npy", np.ascontiguousarray(arr, dtype=np.float32), allow_pickle=False)
    train.to_parquet(cache / "train.parquet", index=False)
    meta = {"feature_service": features.feature_service, "data_hash": frame_hash(df),
            "data_version": data_version(data, root), "rows": len(df),
            "data_lineage": data_lineage(root, [data.validated_dir, features.source_dir]),
            "train_rows": len(train), "val_rows": len(val), "encoder": encoder,
            "contract": contract_meta(contract)}
    (cache / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True, default=str), encoding="utf-8")
    log.info("training set: %d rows (%d train / %d val), hash %s", len(df), len(train), len(val), meta["data_hash"])


def load_tabular(cache: Path) -> TabularData:
    """Read a cache written by :func:`prepare_tabular`.

    Raises:
        TrainingError: the cache is missing a file.
    """
    try:
        meta = json.loads((cache / "meta.json").read_text(encoding="utf-8"))
        arrays = {name: np.load(cache / f"{name}.npy", allow_pickle=False) for name in _ARRAYS}
    except FileNotFoundError as exc:
        raise TrainingError(f"prepared data under {str(cache)!r} is incomplete: {exc.filename!r} is missing") from None
    return TabularData(**arrays, encoder=meta["encoder"], feature_service=meta["feature_service"],
                       data_hash=meta["data_hash"], frame_path=cache / "train.parquet",
                       data_version=meta.get("data_version", ""), data_lineage=meta.get("data_lineage"),
                       contract=meta.get("contract"))
