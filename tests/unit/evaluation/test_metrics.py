"""Metrics and the paired bootstrap against scikit-learn, scipy and hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlops_evaluation import EvaluationError, binary_metrics, paired_bootstrap_f1, perplexity, slice_metrics
from mlops_evaluation.bootstrap import improvement


def test_hand_computed_case() -> None:
    # scores ≥ 0.5 flagged: rows 0,1,3 → TP=2 (rows 0,3), FP=1 (row 1), FN=1 (row 4)
    y = [1, 0, 0, 1, 1, 0]
    s = [0.9, 0.8, 0.1, 0.6, 0.3, 0.2]
    m = binary_metrics(y, s)
    assert m["precision"] == pytest.approx(2 / 3)
    assert m["recall"] == pytest.approx(2 / 3)
    assert m["f1"] == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    # ROC-AUC by counting pairs: positives (.9,.6,.3) vs negatives (.8,.1,.2): 3+2+2 = 7 of 9 ordered right
    assert m["roc_auc"] == pytest.approx(7 / 9)
    # AP: ranking .9(+) .8(-) .6(+) .3(+): precision at each positive 1/1, 2/3, 3/4 → mean
    assert m["pr_auc"] == pytest.approx((1 + 2 / 3 + 3 / 4) / 3)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_against_sklearn_with_ties(seed: int) -> None:
    from sklearn.metrics import average_precision_score, f1_score, precision_score, recall_score, roc_auc_score

    rng = np.random.default_rng(seed)
    y = (rng.random(3000) < 0.1).astype(int)
    s = np.round(np.clip(rng.normal(0.3 + 0.3 * y, 0.2), 0, 1), 2)  # rounding makes many ties
    m = binary_metrics(y, s, threshold=0.45)
    pred = (s >= 0.45).astype(int)
    assert m["f1"] == pytest.approx(f1_score(y, pred))
    assert m["precision"] == pytest.approx(precision_score(y, pred))
    assert m["recall"] == pytest.approx(recall_score(y, pred))
    assert m["roc_auc"] == pytest.approx(roc_auc_score(y, s))
    assert m["pr_auc"] == pytest.approx(average_precision_score(y, s))


def test_roc_auc_matches_scipy_mann_whitney() -> None:
    from scipy.stats import mannwhitneyu

    rng = np.random.default_rng(5)
    y = (rng.random(500) < 0.3).astype(int)
    s = rng.integers(0, 20, 500).astype(float) + y * 3
    u = mannwhitneyu(s[y == 1], s[y == 0]).statistic
    assert binary_metrics(y, s)["roc_auc"] == pytest.approx(u / (y.sum() * (len(y) - y.sum())))


def test_slices_and_bad_input() -> None:
    y = np.array([1, 0, 1, 0])
    s = np.array([0.9, 0.1, 0.2, 0.7])
    out = slice_metrics(y, s, {"channel": ["web", "web", "app", "app"]})
    assert out["channel"]["web"]["f1"] == 1.0 and out["channel"]["app"]["f1"] == 0.0
    with pytest.raises(EvaluationError, match=r"labels must be 0 or 1; got \[2\]"):
        binary_metrics([1, 2], [0.1, 0.2])
    with pytest.raises(EvaluationError, match="same length"):
        binary_metrics([1, 0], [0.1])
    with pytest.raises(EvaluationError, match="1 are NaN"):
        binary_metrics([1, 0], [0.1, math.nan])
    with pytest.raises(EvaluationError, match="'channel' has 1 values for 4 rows"):
        slice_metrics(y, s, {"channel": ["web"]})
    assert math.isnan(binary_metrics([0, 0], [0.1, 0.2])["roc_auc"])


def test_perplexity_is_exp_mean_nll() -> None:
    assert perplexity([math.log(4)] * 3) == pytest.approx(4.0)
    with pytest.raises(EvaluationError):
        perplexity([])


def test_bootstrap_agrees_with_scipy_paired_bootstrap() -> None:
    from scipy.stats import bootstrap
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(11)
    y = (rng.random(2000) < 0.15).astype(int)
    a = np.where(rng.random(2000) < 0.85, y, 1 - y)  # better model: 15% of labels flipped
    b = np.where(rng.random(2000) < 0.75, y, 1 - y)  # worse: 25% flipped

    def diff(yy: np.ndarray, aa: np.ndarray, bb: np.ndarray) -> float:
        return f1_score(yy, aa) - f1_score(yy, bb)

    ours = paired_bootstrap_f1(y, a, b, samples=2000, confidence=0.9, seed=3)
    ref = bootstrap((y, a, b), diff, paired=True, vectorized=False, n_resamples=2000, confidence_level=0.9,
                    method="percentile", rng=np.random.default_rng(4))
    assert ours.estimate == pytest.approx(diff(y, a, b))
    assert ours.lower == pytest.approx(ref.confidence_interval.low, abs=0.01)
    assert ours.upper == pytest.approx(ref.confidence_interval.high, abs=0.01)
    assert ours.lower > 0  # the better model is reliably better
    same = paired_bootstrap_f1(y, a, a, samples=200, seed=0)
    assert same.lower == same.upper == same.estimate == 0.0  # paired: identical predictions never differ


def test_relative_improvement() -> None:
    assert improvement(0.6, 0.5, "relative") == pytest.approx(0.2)
    assert improvement(0.1, 0.0, "relative") == math.inf
    with pytest.raises(EvaluationError, match="'ratio'"):
        improvement(0.1, 0.0, "ratio")  # type: ignore[arg-type]
