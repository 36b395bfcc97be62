"""Classification metrics on plain arrays, overall and per slice; perplexity for language models.

Written with numpy only (no sklearn at run time); the tests check them against scikit-learn and
hand-computed cases. Ties in scores are handled the way sklearn does (one threshold per distinct score).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mlops_evaluation.errors import EvaluationError

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


def f1_counts(tp: Any, fp: Any, fn: Any) -> Any:
    """F1 from counts (arrays allowed); 0 where there are no positives predicted nor actual."""
    denom = 2 * np.asarray(tp) + np.asarray(fp) + np.asarray(fn)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denom > 0, 2 * np.asarray(tp) / np.where(denom > 0, denom, 1), 0.0)


def roc_auc(y: np.ndarray, s: np.ndarray) -> float:
    """Area under the ROC curve (Mann–Whitney U with mid-ranks for ties); NaN with one class only."""
    pos = int(y.sum())
    neg = len(y) - pos
    if pos == 0 or neg == 0:
        return math.nan
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=np.float64)
    sorted_s = s[order]
    # mid-ranks: every member of a tie group gets the mean of the group's ranks
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_s)) + 1]
    ends = np.r_[starts[1:], len(s)]
    for a, b in zip(starts, ends, strict=True):
        ranks[order[a:b]] = (a + b + 1) / 2.0
    return float((ranks[y == 1].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def average_precision(y: np.ndarray, s: np.ndarray) -> float:
    """PR-AUC as average precision: Σ (R_k − R_{k−1}) P_k over distinct thresholds; NaN without positives."""
    pos = int(y.sum())
    if pos == 0:
        return math.nan
    order = np.argsort(-s, kind="mergesort")
    ys, ss = y[order], s[order]
    last = np.r_[np.flatnonzero(np.diff(ss)), len(ss) - 1]  # last index of each distinct score
    tp = np.cumsum(ys)[last]
    fp = (last + 1) - tp
    precision = tp / (tp + fp)
    recall = tp / pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def binary_metrics(labels: Any, scores: Any, threshold: float = 0.5) -> dict[str, float]:
    """F1, precision, recall at ``threshold`` (score ≥ threshold is positive), PR-AUC, ROC-AUC, counts."""
    y, s = check_binary(labels, scores)
    pred = s >= threshold
    tp = int(np.sum(pred & (y == 1)))
    fp = int(np.sum(pred & (y == 0)))
    fn = int(np.sum(~pred & (y == 1)))
    return {
        "f1": float(f1_counts(tp, fp, fn)),
        "precision": tp / (tp + fp) if tp + fp else 0.0,
        "recall": tp / (tp + fn) if tp + fn else 0.0,
        "pr_auc": average_precision(y, s),
        "roc_auc": roc_auc(y, s),
        "rows": float(len(y)),
        "positives": float(y.sum()),
    }


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
