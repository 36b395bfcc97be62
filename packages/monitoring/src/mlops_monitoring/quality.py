"""Realized quality from delayed labels: precision, recall and F1 of the window's logged predictions."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from mlops_config import MonitoringConfig
from mlops_model import ReferenceF1, ThresholdChoice, reference_f1, resolve_threshold, statistics
from mlops_monitoring.errors import MonitoringError


def served_threshold(reference: Any, monitoring: MonitoringConfig) -> ThresholdChoice:
    """The threshold the window's predictions are decided at: ``monitoring.decision_threshold`` when set (an
    override), else the served version's own, which :func:`mlops_monitoring.source.fetch_reference_profile`
    copies from its ``model.json`` into the profile (``decision_threshold``). Reference rows, or a profile of an
    export that records none, fall back to the legacy 0.5, and the note says so."""
    meta = reference if isinstance(reference, dict) else None
    version = ((meta or {}).get("source") or {}).get("version")
    return resolve_threshold(meta, monitoring.decision_threshold, override_key="monitoring.decision_threshold",
                             model=f"served v{version}" if version else "the served version")


def validation_reference(reference: Any, monitoring: MonitoringConfig) -> ReferenceF1:
    """The F1 the window's realized F1 (at :func:`served_threshold`) is compared with: the served version's
    validation F1 at its recorded threshold (``decision_threshold.f1``, copied from its ``model.json`` into the
    profile). A profile of an export that records none falls back to its ``metrics.f1``, and the note says so;
    reference rows carry no F1."""
    meta = reference if isinstance(reference, dict) else None
    version = ((meta or {}).get("source") or {}).get("version")
    fallback = ((meta or {}).get("metrics") or {}).get("f1")
    return reference_f1(served_threshold(reference, monitoring),
                        model=f"served v{version}" if version else "the served version",
                        fallback=None if fallback is None else float(fallback),
                        fallback_what="the reference profile's metrics.f1")


@dataclass(frozen=True)
class RealizedQuality:
    """Quality of the predictions whose labels have arrived."""

    n_predictions: int
    n_labelled: int
    threshold: float
    precision: float
    recall: float
    f1: float
    tp: int
    fp: int
    fn: int
    positive_rate: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


def realized_quality(
    predictions: pd.DataFrame, labels: pd.DataFrame, threshold: float, *, key: str, label: str, score: str = "score",
) -> RealizedQuality:
    """Join the window's predictions to their labels on ``key`` and score them at ``threshold``: ``key`` and
    ``label`` are the model contract's ``record_id`` and ``label`` (no model's names stand in for another's).

    Predictions without a label yet are left out of the metrics and counted (``n_predictions`` −
    ``n_labelled``). A metric whose denominator is 0 is 0.

    Raises:
        MonitoringError: a needed column is missing, a label is not 0/1, or a key is labelled twice.
    """
    for frame, cols, what in ((predictions, (key, score), "predictions"), (labels, (key, label), "labels")):
        absent = [c for c in cols if c not in frame.columns]
        if absent:
            raise MonitoringError(f"{what} lack columns {absent!r}; they have {sorted(map(str, frame.columns))!r}")
    dup = labels[key][labels[key].duplicated()]
    if len(dup):
        raise MonitoringError(f"labels hold {key} {dup.iloc[0]!r} more than once; expected one label per {key}")
    values = labels[label]
    bad = values[~values.isin([0, 1, True, False])]
    if len(bad):
        raise MonitoringError(f"label {label!r} holds {bad.iloc[0]!r}; expected 0/1 or true/false")
    joined = predictions[[key, score]].merge(labels[[key, label]], on=key, how="inner")
    y = joined[label].astype(bool).to_numpy()
    m = statistics.threshold_metrics(y, joined[score].to_numpy(dtype=np.float64), threshold)
    return RealizedQuality(
        n_predictions=len(predictions), n_labelled=len(joined), threshold=threshold,
        precision=m["precision"], recall=m["recall"], f1=m["f1"], tp=int(m["tp"]), fp=int(m["fp"]), fn=int(m["fn"]),
        positive_rate=float(y.mean()) if len(y) else 0.0,
    )
