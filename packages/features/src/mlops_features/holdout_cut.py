"""The cut between the rows a model may learn from and the holdout its gates score it on: the newest
``evaluation.tabular.holdout_fraction`` of the FeatureService training set by event time (ties by ``transaction_id``).

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

__all__ = ["ORDER", "order_by_time", "row_key", "split_off_holdout"]

ORDER = ("event_timestamp", "transaction_id")
"""Sort keys of the cut, those of them the frame has: event time, ties by transaction id."""


def order_by_time(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows oldest first by :data:`ORDER` (stable sort), with a fresh index."""
    keys = [c for c in ORDER if c in frame.columns]
    ordered = frame.sort_values(keys, kind="mergesort") if keys else frame
    return ordered.reset_index(drop=True)


def split_off_holdout(frame: pd.DataFrame, fraction: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(rest, holdout)``: the newest ``fraction`` of the rows (time order, ties by transaction id) and the
    older rows before them, both time-ordered with fresh indexes. The holdout holds
    ``len(frame) - int(len(frame) * (1 - fraction))`` rows, the count evaluation has always cut.

    Raises:
        DataError: ``fraction`` is not strictly between 0 and 1 (the value is named).
    """
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction < 1:
        raise DataError(f"holdout fraction {fraction!r} must be a number between 0 and 1 (exclusive): "
                        "evaluation.tabular.holdout_fraction")
    ordered = order_by_time(frame)
    cut = int(len(ordered) * (1 - fraction))
    return ordered.iloc[:cut].reset_index(drop=True), ordered.iloc[cut:].reset_index(drop=True)


def row_key(frame: pd.DataFrame, index: int = 0) -> dict[str, Any] | None:
    """The :data:`ORDER` key of row ``index`` (``{"event_timestamp": ISO text, "transaction_id": ...}``), or
    ``None`` for an empty frame: where a holdout starts (for a model's lineage to record)."""
    if len(frame) == 0:
        return None
    row = frame.iloc[index]
    key: dict[str, Any] = {}
    for column in ORDER:
        if column in frame.columns:
            value = row[column]
            key[column] = value.isoformat() if hasattr(value, "isoformat") else (
                value.item() if hasattr(value, "item") else value)
    return key
