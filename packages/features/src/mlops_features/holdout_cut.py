"""The cut between the rows a model may learn from and the holdout its gates score it on: the newest
``evaluation.tabular.holdout_fraction`` of the FeatureService training set by event time, ties by the contract's
``record_id`` (fraud's: ``transaction_id``).

Evaluation (``mlops_evaluation.holdout``) cuts its holdout here. Training does not yet (issue #30): tabular
training validates on its own newest ``val_fraction`` of the same set, so with the default fractions the gates'
holdout is training's validation split, the rows its threshold and calibrator were tuned on. Training is to call
:func:`split_off_holdout` first and fit, validate and calibrate on the rest only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlops_features.errors import DataError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["TIME", "order_by_time", "order_keys", "row_key", "split_off_holdout"]

TIME = "event_timestamp"
"""The event-time column every tabular training set has."""


def order_keys(record_id: str) -> tuple[str, str]:
    """Sort keys of the cut: event time, ties by ``record_id`` (the contract's; fraud's is ``transaction_id``)."""
    return (TIME, record_id)


def order_by_time(frame: pd.DataFrame, *, record_id: str) -> pd.DataFrame:
    """The rows oldest first by :func:`order_keys` (those of them the frame has; stable sort), with a fresh index."""
    keys = [c for c in order_keys(record_id) if c in frame.columns]
    ordered = frame.sort_values(keys, kind="mergesort") if keys else frame
    return ordered.reset_index(drop=True)


def split_off_holdout(frame: pd.DataFrame, fraction: float, *, record_id: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(rest, holdout)``: the newest ``fraction`` of the rows (time order, ties by ``record_id``, the contract's)
    and the older rows before them, both time-ordered with fresh indexes. The holdout holds
    ``len(frame) - int(len(frame) * (1 - fraction))`` rows, the count evaluation has always cut.

    Raises:
        DataError: ``fraction`` is not strictly between 0 and 1 (the value is named).
    """
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction < 1:
        raise DataError(f"holdout fraction {fraction!r} must be a number between 0 and 1 (exclusive): "
                        "evaluation.tabular.holdout_fraction")
    ordered = order_by_time(frame, record_id=record_id)
    cut = int(len(ordered) * (1 - fraction))
    return ordered.iloc[:cut].reset_index(drop=True), ordered.iloc[cut:].reset_index(drop=True)


def row_key(frame: pd.DataFrame, index: int = 0, *, record_id: str) -> dict[str, Any] | None:
    """The :func:`order_keys` key of row ``index`` (``{"event_timestamp": ISO text, record_id: ...}``), or
    ``None`` for an empty frame: where a holdout starts (for a model's lineage to record)."""
    if len(frame) == 0:
        return None
    row = frame.iloc[index]
    key: dict[str, Any] = {}
    for column in order_keys(record_id):
        if column in frame.columns:
            value = row[column]
            key[column] = value.isoformat() if hasattr(value, "isoformat") else (
                value.item() if hasattr(value, "item") else value)
    return key
