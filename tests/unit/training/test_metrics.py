"""Validation metrics against scipy and hand-counted cases."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from mlops_model.statistics import roc_auc
from mlops_training.metrics import classification_metrics


def test_roc_auc_equals_mann_whitney_u_over_pairs_with_ties() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 500)
    s = np.round(rng.random(500) + 0.3 * y, 2)  # rounding makes ties
    u = mannwhitneyu(s[y == 1], s[y == 0]).statistic
    assert roc_auc(y, s) == pytest.approx(u / ((y == 1).sum() * (y == 0).sum()), abs=1e-12)


def test_classification_metrics_on_a_hand_counted_case() -> None:
    y = np.array([1, 1, 1, 0, 0, 0, 0, 0])
    s = np.array([0.9, 0.6, 0.2, 0.7, 0.1, 0.1, 0.3, 0.4])
    m = classification_metrics(y, s)  # tp=2 fp=1 fn=1 tn=4
    assert m["val_precision"] == pytest.approx(2 / 3)
    assert m["val_recall"] == pytest.approx(2 / 3)
    assert m["val_f1"] == pytest.approx(2 / 3)
    assert m["val_accuracy"] == pytest.approx(6 / 8)
    # positive-over-negative pairs: 0.9 beats 5, 0.6 beats 4, 0.2 beats 2 -> 11 of 15
    assert m["val_roc_auc"] == pytest.approx(11 / 15)


def test_auc_without_both_classes_is_nan() -> None:
    assert np.isnan(roc_auc(np.ones(4), np.arange(4.0)))
