"""The calibration gate's three outcomes on hand-built holdouts whose true calibration error is known by
construction (labels drawn from a known probability), and the ECE checked against a binning written here."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from mlops_config import EvaluationConfig, TabularEvaluationConfig
from mlops_evaluation import calibration_gate

SECTION = EvaluationConfig(bootstrap_samples=300, tabular=TabularEvaluationConfig(max_calibration_error=0.05))
ISOTONIC = {"calibration": {"method": "isotonic", "x": [0.0, 1.0], "y": [0.0, 1.0], "ece_after": 0.01}}


def _holdout(n: int, offset: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Scores in [0.1, 0.9] and labels drawn with probability ``score - offset``: a true ECE of ``offset``."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(0.1, 0.9, n)
    y = (rng.random(n) < s - offset).astype(int)
    return y, s


def _ece_by_hand(y: np.ndarray, s: np.ndarray, bins: int = 10) -> float:
    edges = np.linspace(0, 1, bins + 1)
    total = 0.0
    for lo, hi in itertools.pairwise(edges):
        m = (s >= lo) & (s < hi) if hi < 1 else (s >= lo)
        if m.any():
            total += m.mean() * abs(s[m].mean() - y[m].mean())
    return total


def test_a_calibrated_model_passes_with_its_ece_in_the_evidence() -> None:
    y, s = _holdout(20_000, 0.0)
    gate = calibration_gate(y, s, ISOTONIC, SECTION)
    assert gate.verdict == "pass", gate.reason
    assert gate.evidence["ece"] == pytest.approx(_ece_by_hand(y, s), abs=1e-12)
    assert gate.evidence["ci"][1] <= 0.05 and gate.evidence["method"] == "isotonic"


def test_a_miscalibrated_model_fails() -> None:
    y, s = _holdout(20_000, 0.09)  # every score 9 points above the fraud rate it stands for
    gate = calibration_gate(y, s, ISOTONIC, SECTION)
    assert gate.verdict == "fail", gate.reason
    assert gate.evidence["ci"][0] > 0.05 and gate.evidence["ece"] == pytest.approx(0.09, abs=0.01)
    assert "does not hold" in gate.reason


def test_an_ece_at_the_bound_is_inconclusive_and_does_not_pass() -> None:
    y, s = _holdout(3_000, 0.05, seed=2)
    gate = calibration_gate(y, s, ISOTONIC, SECTION)
    low, high = gate.evidence["ci"]
    assert low <= 0.05 < high, (low, high)  # the construction straddles the bound
    assert gate.verdict == "inconclusive" and not gate.passed and "straddles" in gate.reason


def test_too_few_frauds_is_inconclusive() -> None:
    y = np.zeros(500, dtype=int)
    y[:5] = 1
    gate = calibration_gate(y, np.full(500, 0.01), ISOTONIC, SECTION)
    assert gate.verdict == "inconclusive" and "5 frauds" in gate.reason
    assert "calibration_min_positives=30" in gate.reason


def test_an_uncalibrated_export_fails_by_default_and_passes_unchecked_when_not_required() -> None:
    y, s = _holdout(5_000, 0.2)
    optional = SECTION.tabular.model_copy(update={"calibration_required": False})
    free = calibration_gate(y, s, {}, SECTION.model_copy(update={"tabular": optional}))
    assert free.passed and free.evidence["checked"] is False and "not calibrated" in free.reason
    required = calibration_gate(y, s, {}, SECTION)  # calibration on by default: an export without it fails
    assert SECTION.tabular.calibration_required is True
    assert required.verdict == "fail" and "calibration_required" in required.reason
