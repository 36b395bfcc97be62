"""The platform's statistics, one definition each: canary analysis, drift, training and the gates import them.

- **PSI** (population stability index) = Σ (cur − ref) · ln(cur / ref) over bin *shares*. A share of
  exactly 0 is replaced by ``floor`` (default 1e-4) on either side, so an empty bin contributes a large but
  finite term; every non-empty share is used as measured. Why not floor every share (``max(share, floor)``):
  that changes the value of any bin rarer than the floor, so two checks on the same data (canary and drift
  once disagreed) would differ with the bin count; only an empty bin needs a stand-in, and only there is
  the textbook sum undefined.
- **KS**: ``scipy.stats.ks_2samp``'s statistic and p-value (two-sided, method ``auto``), from sorted
  samples by :func:`ks_sorted` so a reference sorted once is not sorted again per window; against a
  reference known only by its ECDF sketch, :func:`ks_from_sketch` (D within about one sketch step of the
  exact statistic).
- **chi²**: ``scipy.stats.chi2_contingency`` on the 2 × k table of reference vs current counts, with
  Cramér's V = sqrt(chi² / N) (2 rows: min(2, k) − 1 = 1) beside it.
- **Binary classification**: counts at a threshold (score ≥ threshold is positive), precision, recall and F1
  (0 where a denominator is 0); ROC AUC and average precision (PR AUC) from scikit-learn, NaN where a class
  is absent.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mlops_core import ProfileError, bin_counts, quantile_edges
from mlops_model.errors import StatisticsError


def psi(ref_counts: Any, cur_counts: Any, floor: float = 1e-4) -> float:
    """PSI of two count vectors over the same bins (see the module doc: only empty shares are floored)."""
    ref = np.asarray(ref_counts, dtype=np.float64)
    cur = np.asarray(cur_counts, dtype=np.float64)
    if ref.shape != cur.shape:
        raise StatisticsError(f"PSI needs counts over the same bins, got shapes {ref.shape} and {cur.shape}")
    if ref.sum() <= 0 or cur.sum() <= 0:
        raise StatisticsError(f"PSI needs observations on both sides, got {ref.sum():g} and {cur.sum():g}")
    ref_share = ref / ref.sum()
    cur_share = cur / cur.sum()
    ref_share[ref_share == 0] = floor
    cur_share[cur_share == 0] = floor
    return float(np.sum((cur_share - ref_share) * np.log(cur_share / ref_share)))


def quantile_bin_counts(expected: Any, actual: Any, bins: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Counts of both samples over quantile bins of ``expected``: the reference profile's one definition
    (:func:`mlops_core.quantile_edges`, :func:`mlops_core.bin_counts`): the distinct quantiles of ``expected``
    at ``k / bins`` are the edges, bin ``i`` holds ``edge[i-1] <= x < edge[i]``, the outer bins are open-ended.
    """
    e = np.sort(np.asarray(expected, dtype=np.float64))
    a = np.sort(np.asarray(actual, dtype=np.float64))
    if e.size == 0 or a.size == 0:
        raise StatisticsError(f"quantile bins need values on both sides, got {e.size} and {a.size}")
    if np.isnan(e[-1]) or np.isnan(a[-1]):  # sorted: a NaN is last
        raise StatisticsError("quantile bins got NaN; expected numbers (count missing values apart)")
    try:
        edges = quantile_edges(e, bins)
    except ProfileError as exc:
        raise StatisticsError(str(exc)) from None
    return bin_counts(e, edges), bin_counts(a, edges)


def ks(ref: Any, cur: Any) -> tuple[float, float]:
    """Two-sample KS statistic and two-sided p-value, equal to ``scipy.stats.ks_2samp`` (method ``auto``)."""
    ref_sorted, cur_sorted = np.sort(np.asarray(ref, dtype=np.float64)), np.sort(np.asarray(cur, dtype=np.float64))
    for side, values in (("reference", ref_sorted), ("current", cur_sorted)):
        if values.size and np.isnan(values[-1]):  # sorted: a NaN is last
            raise StatisticsError(f"KS got NaN in the {side} sample; expected numbers (drop missing values first)")
    return ks_sorted(ref_sorted, cur_sorted)



KS_EXACT_MAX_N = 10_000
"""``ks_2samp``'s method ``auto`` computes the exact p-value when both samples are at most this large."""


def ks_sorted(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """``ks(a, b)`` for samples already sorted ascending: a drift check sorts each side once (the reference
    once per profile), so a window costs a sort of the window only.

    ``ks_2samp`` sorts both samples again and evaluates both ECDFs at all n₁ + n₂ pooled points. Between two
    consecutive distinct values of the smaller sample its ECDF is constant and the other one only rises, so
    F_a − F_b takes its extremes at those values (right-continuous) and just below them (left limits, which
    are the values at the pooled point before): 4 ``searchsorted`` of the smaller sample's distinct values
    give the same D, to the bit, as the same ``count / n`` differences. Small samples (an exact p-value)
    go to scipy itself.
    """
    n1, n2 = a.shape[0], b.shape[0]
    if min(n1, n2) == 0:
        raise StatisticsError(f"KS needs values on both sides, got {n1} and {n2}")
    if max(n1, n2) <= KS_EXACT_MAX_N:
        from scipy import stats

        result = stats.ks_2samp(a, b)
        return float(result.statistic), float(result.pvalue)
    small = b if n2 <= n1 else a
    points = small[_last_of_ties(small)]
    diffs = np.concatenate([
        np.searchsorted(a, points, side="right") / n1 - np.searchsorted(b, points, side="right") / n2,
        np.searchsorted(a, points, side="left") / n1 - np.searchsorted(b, points, side="left") / n2,
    ])
    min_s = float(np.clip(-diffs.min(), 0, 1))
    max_s = float(diffs.max())
    d = min_s if min_s > max_s else max_s
    return d, ks_asymptotic_pvalue(d, n1, n2)


def ks_asymptotic_pvalue(d: float, n1: int, n2: int) -> float:
    """The two-sided p-value ``ks_2samp`` (method ``auto``) gives for statistic ``d`` when a sample exceeds
    :data:`KS_EXACT_MAX_N`: Smirnov's ``kstwo.sf(d, round(m·n / (m + n)))``, clipped to [0, 1].

    For an engine that computes D where the rows are (DuckDB) and brings back only D and the sizes.
    """
    from scipy import stats

    m, n = sorted([float(n1), float(n2)], reverse=True)
    return float(np.clip(stats.kstwo.sf(d, np.round(m * n / (m + n))), 0.0, 1.0))


def _last_of_ties(sorted_values: np.ndarray) -> np.ndarray:
    mask = np.ones(sorted_values.shape[0], dtype=bool)
    mask[:-1] = sorted_values[1:] != sorted_values[:-1]
    return mask


def ks_from_sketch(ecdf: np.ndarray, n_ref: int, cur_sorted: np.ndarray) -> tuple[float, float]:
    """Approximate KS of a current sample against a reference known only by its ECDF sketch.

    ``ecdf`` holds the reference quantiles at 0, 1/(k-1), …, 1. F_ref is the step function through them
    (at a run of equal quantiles, the last one's level, which keeps discrete columns right), so D is within
    about 1/(k-1) of the exact statistic; the p-value is scipy's asymptotic ``kstwo.sf`` with ``n_ref`` as the
    reference size, as ``ks_2samp`` uses for large samples.
    """
    k = ecdf.shape[0]
    n2 = cur_sorted.shape[0]
    at_cur = _last_of_ties(cur_sorted)
    cur_pts = cur_sorted[at_cur]
    f_ref_at_cur = np.clip(np.searchsorted(ecdf, cur_pts, side="right") - 1, 0, None) / (k - 1)
    f_ref_at_cur[cur_pts < ecdf[0]] = 0.0
    d_cur = np.abs(f_ref_at_cur - (np.flatnonzero(at_cur) + 1) / n2)
    at_ref = _last_of_ties(ecdf)
    d_ref = np.abs(np.flatnonzero(at_ref) / (k - 1) - np.searchsorted(cur_sorted, ecdf[at_ref], side="right") / n2)
    d = float(max(d_cur.max(), d_ref.max()))
    return d, ks_asymptotic_pvalue(d, n_ref, n2)


def chi2(ref_counts: Any, cur_counts: Any) -> tuple[float, float, float]:
    """chi² statistic, p-value and Cramér's V of reference vs current counts over the same categories.

    Categories empty on both sides are left out (their expected count is 0). One category left: no
    evidence of a difference, statistic 0 and p-value 1.
    """
    from scipy import stats

    table = np.vstack([np.asarray(ref_counts, dtype=np.int64), np.asarray(cur_counts, dtype=np.int64)])
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2:
        return 0.0, 1.0, 0.0
    result = stats.chi2_contingency(table)
    statistic = float(result.statistic)
    return statistic, float(result.pvalue), math.sqrt(statistic / table.sum()) if table.sum() else 0.0


def f1_counts(tp: Any, fp: Any, fn: Any) -> Any:
    """F1 = 2tp / (2tp + fp + fn) from counts (arrays allowed); 0 where nothing is predicted nor actual."""
    tp, fp, fn = np.asarray(tp), np.asarray(fp), np.asarray(fn)
    denom = 2 * tp + fp + fn
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denom > 0, 2 * tp / np.where(denom > 0, denom, 1), 0.0)


def expected_confusion(scores: Any, threshold: float) -> dict[str, float]:
    """Expected TP, FP, FN, TN of calibrated ``scores`` at ``threshold`` (CBPE: a score is the probability of a
    positive, so a flagged row is a true positive with probability ``s`` and a false one with ``1 - s``)."""
    s = np.asarray(scores, dtype=np.float64).ravel()
    flagged = s >= threshold
    return {"tp": float(s[flagged].sum()), "fp": float((1 - s[flagged]).sum()),
            "fn": float(s[~flagged].sum()), "tn": float((1 - s[~flagged]).sum())}


def threshold_metrics(labels: Any, scores: Any, threshold: float = 0.5) -> dict[str, float]:
    """``tp, fp, fn, tn, precision, recall, f1, accuracy`` at ``threshold`` (score ≥ threshold is positive)."""
    from sklearn.metrics import confusion_matrix

    y = np.asarray(labels).astype(np.int64)
    pred = (np.asarray(scores, dtype=np.float64) >= threshold).astype(np.int64)
    tn, fp, fn, tp = (int(c) for c in confusion_matrix(y, pred, labels=[0, 1]).ravel())
    return {"tp": tp, "fp": fp, "fn": fn, "tn": tn,
            "precision": tp / (tp + fp) if tp + fp else 0.0, "recall": tp / (tp + fn) if tp + fn else 0.0,
            "f1": float(f1_counts(tp, fp, fn)), "accuracy": (tp + tn) / len(y) if len(y) else math.nan}


def roc_auc(labels: Any, scores: Any) -> float:
    """Area under the ROC curve (scikit-learn; ties count half); NaN unless both classes are present."""
    from sklearn.metrics import roc_auc_score

    y = np.asarray(labels).astype(np.int64)
    return float(roc_auc_score(y, np.asarray(scores, dtype=np.float64))) if 0 < y.sum() < len(y) else math.nan


def average_precision(labels: Any, scores: Any) -> float:
    """PR AUC as average precision (scikit-learn: Σ (R_k − R_k−1) P_k over distinct thresholds); NaN without
    positives."""
    from sklearn.metrics import average_precision_score

    y = np.asarray(labels).astype(np.int64)
    return float(average_precision_score(y, np.asarray(scores, dtype=np.float64))) if y.sum() else math.nan


def binary_metrics(labels: Any, scores: Any, threshold: float = 0.5) -> dict[str, float]:
    """F1, precision, recall at ``threshold``, PR AUC (average precision) and ROC AUC, rows and positives."""
    y = np.asarray(labels).astype(np.int64)
    counts = threshold_metrics(y, scores, threshold)
    return {"f1": counts["f1"], "precision": counts["precision"], "recall": counts["recall"],
            "pr_auc": average_precision(y, scores), "roc_auc": roc_auc(y, scores),
            "rows": float(len(y)), "positives": float(y.sum())}


def expected_calibration_error(labels: Any, scores: Any, bins: int = 10) -> float:
    """ECE: Σ_b (n_b / n) |mean score_b − positive rate_b| over ``bins`` equal-width score bins of [0, 1]."""
    y = np.asarray(labels, dtype=np.float64).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    if not len(s):
        return math.nan
    index = np.minimum((s * bins).astype(np.int64), bins - 1)  # a score of 1.0 falls in the last bin
    total = 0.0
    for b in np.unique(index):
        m = index == b
        total += m.sum() / len(s) * abs(s[m].mean() - y[m].mean())
    return float(total)


def rate_ratio_interval(num_a: Any, den_a: Any, num_b: Any, den_b: Any, *, level: float = 0.9,
                        resamples: int = 4000, seed: int = 0) -> tuple[float, float, float]:
    """B's rate over A's, each a ratio of sums (``Σ num / Σ den``, e.g. tokens over seconds), and the central
    percentile bootstrap interval at ``level``: each sample's units (a ``num, den`` pair, e.g. one request) are
    resampled with replacement, the two samples independently. Returns ``(ratio, low, high)``.

    A ratio of sums has no simple variance, and a mean of per-unit ratios is ruled by the shortest units; the
    bootstrap of the units keeps both the pairing within a unit and the definition of the rate.

    Raises:
        StatisticsError: a sample is empty, its two arrays differ in length or hold a negative or non-finite
            value, a denominator sums to 0, or ``level`` is not in (0, 1).
    """
    if not 0 < level < 1:
        raise StatisticsError(f"interval level must lie in (0, 1), got {level!r}")
    samples = []
    for name, num, den in (("A", num_a, den_a), ("B", num_b, den_b)):
        n, d = np.asarray(num, dtype=np.float64).ravel(), np.asarray(den, dtype=np.float64).ravel()
        if n.size == 0 or n.size != d.size:
            raise StatisticsError(f"sample {name}: {n.size} numerators and {d.size} denominators; need the same "
                                  "number, at least one")
        if not (np.isfinite(n).all() and np.isfinite(d).all()) or (n < 0).any() or (d < 0).any():
            raise StatisticsError(f"sample {name}: numerators and denominators must be finite and >= 0")
        if d.sum() <= 0:
            raise StatisticsError(f"sample {name}: the denominators sum to 0; the rate is undefined")
        samples.append((n, d))
    (na, da), (nb, db) = samples
    ratio = float((nb.sum() / db.sum()) / (na.sum() / da.sum()))
    rng = np.random.default_rng(seed)
    out = np.empty(resamples)
    block = 256  # resamples per block: memory is block × units, whatever the sample size
    for start in range(0, resamples, block):
        k = min(block, resamples - start)
        ia, ib = rng.integers(0, na.size, (k, na.size)), rng.integers(0, nb.size, (k, nb.size))
        sa, sb = da[ia].sum(axis=1), db[ib].sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):  # a resample of only zero-length units: no rate
            out[start:start + k] = (nb[ib].sum(axis=1) / sb) / (na[ia].sum(axis=1) / sa)
    out = out[np.isfinite(out)]
    if out.size == 0:
        raise StatisticsError("no bootstrap resample had a defined rate on both sides")
    low, high = np.quantile(out, [(1 - level) / 2, (1 + level) / 2])
    return ratio, float(low), float(high)
