"""Classification metrics on checked arrays, overall and per slice; perplexity for language models.

The definitions are :mod:`mlops_model.statistics` (scikit-learn underneath); this module checks the inputs
and slices them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mlops_evaluation.errors import EvaluationError
from mlops_model import statistics

METRICS = ("f1", "precision", "recall", "pr_auc", "roc_auc")


def check_binary(labels: Any, scores: Any) -> tuple[np.ndarray, np.ndarray]:
    """Labels as 0/1 ints and scores as floats, same length, finite; raise naming what is wrong."""
    y = np.asarray(labels)
    s = np.asarray(scores, dtype=np.float64)
    if y.ndim != 1 or s.ndim != 1 or len(y) != len(s):
        raise EvaluationError(f"labels {y.shape} and scores {s.shape} must be 1-D arrays of the same length")
    if len(y) == 0:
        raise EvaluationError("no rows to score: the holdout is empty")
    bad = ~np.isin(y, (0, 1))
    if bad.any():
        raise EvaluationError(f"labels must be 0 or 1; got {y[bad][:5].tolist()!r} (first bad values)")
    if not np.isfinite(s).all():
        raise EvaluationError(f"scores must be finite; {int((~np.isfinite(s)).sum())} are NaN or inf")
    return y.astype(np.int64), s


def binary_metrics(labels: Any, scores: Any, threshold: float = 0.5) -> dict[str, float]:
    """F1, precision, recall at ``threshold`` (score ≥ threshold is positive), PR-AUC, ROC-AUC, counts
    (:func:`mlops_model.statistics.binary_metrics`, after checking the inputs)."""
    y, s = check_binary(labels, scores)
    return statistics.binary_metrics(y, s, threshold)


def slice_metrics(labels: Any, scores: Any, slices: Mapping[str, Sequence[Any]], threshold: float = 0.5
                  ) -> dict[str, dict[str, dict[str, float]]]:
    """``{column: {value: metrics}}`` for each slice column (a sequence aligned with ``labels``)."""
    y, s = check_binary(labels, scores)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for column, values in slices.items():
        v = np.asarray(values, dtype=object)
        if len(v) != len(y):
            raise EvaluationError(f"slice column {column!r} has {len(v)} values for {len(y)} rows")
        keys = v.astype(str)  # compared as strings so None/NaN categories form one slice each
        out[column] = {val: binary_metrics(y[keys == val], s[keys == val], threshold) for val in sorted(set(keys))}
    return out


def perplexity(token_nll: Any) -> float:
    """exp(mean negative log-likelihood per token), the LM counterpart of the classification metrics."""
    nll = np.asarray(token_nll, dtype=np.float64)
    if nll.size == 0 or not np.isfinite(nll).all():
        raise EvaluationError(f"perplexity needs finite per-token losses; got {nll.size} values")
    return float(math.exp(nll.mean()))
