"""Performance before labels: confidence-based performance estimation (CBPE) from calibrated scores.

If the scores are calibrated (``P(y=1 | score=s) = s``), a window's confusion matrix at the serving threshold
``t`` has an expected value computable without labels: a prediction with ``s >= t`` is a true positive with
probability ``s`` and a false positive with ``1 - s``; below ``t`` a false negative with ``s``, a true negative
with ``1 - s``. Precision, recall and F1 follow from the expected counts; the expected AUC is the probability
that a random (positive, negative) pair is ordered right, each pair weighted by ``s_i (1 - s_j)``.

The interval is the spread of the realized metric the window would show if its labels were drawn from its own
scores (``y_i ~ Bernoulli(s_i)``, seeded): it covers label noise, not a wrong calibration. The estimate holds
under covariate shift (inputs move, ``P(y | x)`` does not) and fails under concept shift, where the scores stop
being calibrated: only labels see that (docs/monitoring.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from mlops_model import statistics
from mlops_monitoring.errors import MonitoringError

METRICS = ("precision", "recall", "f1", "auc")


@dataclass(frozen=True)
class EstimatedPerformance:
    """A window's estimated metrics, each with a ``(low, high)`` interval."""

    n: int
    threshold: float
    precision: float
    recall: float
    f1: float
    auc: float | None
    intervals: dict[str, tuple[float, float]]
    expected_positive_rate: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


def expected_confusion(scores: Any, threshold: float) -> dict[str, float]:
    """Expected TP, FP, FN, TN of calibrated ``scores`` at ``threshold`` (one definition:
    :func:`mlops_model.statistics.expected_confusion`)."""
    return statistics.expected_confusion(_scores(scores), threshold)


def expected_auc(scores: Any) -> float | None:
    """Expected ROC AUC of calibrated ``scores`` (ties count half); ``None`` when no pair can be formed."""
    s = _scores(scores)
    if len(s) < 2:
        return None
    order = np.argsort(s, kind="stable")
    s_sorted = s[order]
    neg = 1 - s_sorted
    below = np.concatenate([[0.0], np.cumsum(neg)])
    _, first, counts = np.unique(s_sorted, return_index=True, return_counts=True)
    ranks = np.repeat(first, counts)  # items strictly below each one: positions [0, rank) of the sorted scores
    tie_neg = np.repeat(np.add.reduceat(neg, first), counts)  # negatives' weight at the same score
    # pair (i positive, j negative), i != j: ordered right when s_i > s_j, half when tied
    numerator = np.sum(s_sorted * (below[ranks] + 0.5 * (tie_neg - neg)))
    denominator = s.sum() * neg.sum() - np.sum(s * (1 - s))
    return float(numerator / denominator) if denominator > 0 else None


def estimate_performance(
    scores: Any, threshold: float, *, interval: float = 0.9, draws: int = 200, seed: int = 0,
) -> EstimatedPerformance:
    """CBPE of one window: expected precision, recall, F1 and AUC of calibrated ``scores`` with intervals.

    Raises:
        MonitoringError: no scores, a score outside [0, 1], or ``interval`` outside (0, 1).
    """
    s = _scores(scores)
    if not len(s):
        raise MonitoringError("no scores to estimate performance from; expected at least one prediction")
    if not 0 < interval < 1:
        raise MonitoringError(f"interval={interval!r} must lie in (0, 1), e.g. 0.9")
    c = expected_confusion(s, threshold)
    precision = c["tp"] / (c["tp"] + c["fp"]) if c["tp"] + c["fp"] > 0 else 0.0
    recall = c["tp"] / (c["tp"] + c["fn"]) if c["tp"] + c["fn"] > 0 else 0.0
    f1 = float(statistics.f1_counts(c["tp"], c["fp"], c["fn"]))
    rng = np.random.default_rng(seed)
    flagged = s >= threshold
    samples: dict[str, list[float]] = {m: [] for m in METRICS}
    for _ in range(draws):
        y = rng.random(len(s)) < s
        tp, fp, fn = int(np.sum(y & flagged)), int(np.sum(~y & flagged)), int(np.sum(y & ~flagged))
        samples["precision"].append(tp / (tp + fp) if tp + fp else 0.0)
        samples["recall"].append(tp / (tp + fn) if tp + fn else 0.0)
        samples["f1"].append(float(statistics.f1_counts(tp, fp, fn)))
        if 0 < y.sum() < len(y):
            samples["auc"].append(statistics.roc_auc(y, s))
    tail = (1 - interval) / 2 * 100
    intervals = {m: (float(np.percentile(v, tail)), float(np.percentile(v, 100 - tail)))
                 for m, v in samples.items() if v}
    return EstimatedPerformance(n=len(s), threshold=threshold, precision=float(precision), recall=float(recall),
                                f1=f1, auc=expected_auc(s), intervals=intervals,
                                expected_positive_rate=float(s.mean()))


def _scores(scores: Any) -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64).ravel()
    bad = s[~((s >= 0) & (s <= 1))]
    if len(bad):
        raise MonitoringError(f"score {float(bad[0])!r} is not a probability in [0, 1]; CBPE needs calibrated scores")
    return s
