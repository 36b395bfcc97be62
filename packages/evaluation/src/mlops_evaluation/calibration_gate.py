"""The calibration gate: the export's recorded calibrator still holds on the holdout.

Performance estimation without labels (CBPE, ``mlops_monitoring.estimation``) and the rollback and canary
signals built on it read a served score as the probability of fraud. Training fits a calibrator on the older half
of its validation split and records it in ``model.json``; this gate measures the expected calibration error
(ECE, :func:`mlops_model.statistics.expected_calibration_error`) of the scores ``ExportedModel`` serves (the
calibrator applied) on the fixed holdout, which training never saw, with a bootstrap interval:

- **pass**: the interval's upper end is at or below ``evaluation.tabular.max_calibration_error``;
- **fail**: its lower end is above the bound (miscalibrated beyond doubt);
- **inconclusive** (does not pass): the interval straddles the bound, or the holdout holds fewer than
  ``evaluation.tabular.calibration_min_positives`` frauds (ECE of a handful of positives says nothing).

An export without a calibrator claims no probabilities: with ``evaluation.tabular.calibration_required`` (the
default) it fails (the decision threshold and the estimate read scores as probabilities), else it passes with the raw
scores' ECE reported and the estimate marked as not to be trusted for this version.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from mlops_config import EvaluationConfig
from mlops_evaluation.gates import GateResult
from mlops_model import statistics

NAME = "calibration"


def ece_interval(labels: Any, scores: Any, *, bins: int, samples: int, confidence: float,
                 seed: int) -> tuple[float, float, float]:
    """``(ece, low, high)``: ECE of the rows and the percentile bootstrap interval over resampled rows."""
    y = np.asarray(labels, dtype=np.float64).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    point = statistics.expected_calibration_error(y, s, bins)
    rng = np.random.default_rng(seed)
    draws = np.array([statistics.expected_calibration_error(y[i], s[i], bins)
                      for i in (rng.integers(0, len(y), len(y)) for _ in range(samples))])
    alpha = (1 - confidence) / 2
    low, high = np.quantile(draws, [alpha, 1 - alpha])
    return point, float(low), float(high)


def calibration_gate(labels: Any, scores: Any, meta: Mapping[str, Any], section: EvaluationConfig, *,
                     seed: int = 0) -> GateResult:
    """Check the holdout ECE of the served (calibrated) ``scores`` against ``section.tabular.max_calibration_error``.

    Args:
        labels: the holdout's 0/1 labels.
        scores: the candidate's scores on it, as ``ExportedModel`` serves them (its calibrator applied).
        meta: the candidate's ``model.json`` (its ``calibration`` entry, if any).
        section: ``evaluation`` (the bound, the minimum positives, bins, bootstrap size and confidence).
    """
    y = np.asarray(labels).astype(np.int64).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    if len(y) != len(s) or not len(y):
        raise ValueError(f"calibration gate: {len(y)} labels for {len(s)} scores")  # the runner's bug
    bound, bins = section.tabular.max_calibration_error, section.tabular.calibration_bins
    recorded = meta.get("calibration") if isinstance(meta.get("calibration"), Mapping) else None
    method = recorded.get("method") if recorded else None
    positives = int(y.sum())
    evidence: dict[str, Any] = {"method": method, "bound": bound, "bins": bins, "rows": len(y),
                                "positives": positives,
                                "recorded_ece_after": recorded.get("ece_after") if recorded else None}
    if positives < section.tabular.calibration_min_positives:
        ece = statistics.expected_calibration_error(y, s, bins)
        return GateResult(NAME, False, f"inconclusive: {positives} frauds in the holdout, fewer than "
                          f"evaluation.tabular.calibration_min_positives={section.tabular.calibration_min_positives}; "
                          f"holdout ECE "
                          f"{ece:.4f} cannot be told from noise", {**evidence, "ece": ece}, inconclusive=True)
    ece, low, high = ece_interval(y, s, bins=bins, samples=section.bootstrap_samples,
                                  confidence=section.confidence, seed=seed)
    evidence.update(ece=ece, ci=[low, high], confidence=section.confidence)
    measured = f"holdout ECE {ece:.4f} ({section.confidence:.0%} CI [{low:.4f}, {high:.4f}]) vs bound {bound:g}"
    if recorded is None:
        if section.tabular.calibration_required:
            return GateResult(NAME, False, "model.json records no calibrator (training.calibration is 'none') and "
                              "evaluation.tabular.calibration_required is set: this profile reads scores as "
                              "probabilities; "
                              + measured, evidence)
        return GateResult(NAME, True, "not calibrated (training.calibration is 'none'): the scores claim no "
                          "probabilities, so nothing is checked and the performance estimate is not to be trusted "
                          "for this version; raw " + measured, {**evidence, "checked": False})
    if high <= bound:
        return GateResult(NAME, True, f"{method} calibrator holds: {measured}", evidence)
    if low > bound:
        return GateResult(NAME, False, f"{method} calibrator does not hold: {measured}", evidence)
    return GateResult(NAME, False, f"inconclusive: the interval straddles the bound; {measured}", evidence,
                      inconclusive=True)
