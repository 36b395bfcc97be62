"""The drift statistics, each a small vectorised function over counts or sorted arrays.

Definitions (the README repeats them; tests check them against scipy and hand-computed cases):

- **PSI** = Σ (cur − ref) · ln(cur / ref) over bin *shares*. A bin share of exactly 0 is replaced by the
  floor (default 1e-4) on either side, so an empty bin contributes a large but finite term; non-empty
  shares are used as they are. Bins: see :mod:`mlops_core.profile` (reference quantiles, open outer edges)
  and :mod:`mlops_monitoring.drift` (categories + "other" + missing).
- **KS**: the two-sample Kolmogorov–Smirnov statistic D = sup |F_ref − F_cur| and its two-sided p-value,
  equal to ``scipy.stats.ks_2samp(ref, cur)`` (method ``auto``): when both samples have at most 10,000
  values scipy's exact p-value is used, otherwise Smirnov's asymptotic ``kstwo.sf(D, round(n·m/(n+m)))``,
  which is what scipy does for such sizes.
- **chi²**: ``scipy.stats.chi2_contingency`` on the 2 × k table of reference vs current counts.
- **Cramér's V** = sqrt(chi² / (N · (min(2, k) − 1))), the effect size beside chi².
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

EXACT_KS_MAX_N = 10_000  # scipy.stats.ks_2samp's MAX_AUTO_N: up to this size 'auto' is exact
ECDF_POINTS = 1001


def psi(ref_counts: np.ndarray, cur_counts: np.ndarray, floor: float = 1e-4) -> float:
    """Population stability index of two count vectors over the same bins (zero shares floored)."""
    ref = np.asarray(ref_counts, dtype=np.float64)
    cur = np.asarray(cur_counts, dtype=np.float64)
    if ref.shape != cur.shape:
        raise ValueError(f"PSI needs counts over the same bins, got {ref.shape} and {cur.shape}")
    ref_share = ref / ref.sum()
    cur_share = cur / cur.sum()
    ref_share[ref_share == 0] = floor
    cur_share[cur_share == 0] = floor
    return float(np.sum((cur_share - ref_share) * np.log(cur_share / ref_share)))


def _last_of_ties(sorted_values: np.ndarray) -> np.ndarray:
    """Mask of the last element of each run of equal values in a sorted array."""
    mask = np.ones(sorted_values.shape[0], dtype=bool)
    mask[:-1] = sorted_values[1:] != sorted_values[:-1]
    return mask


def ks_statistic_sorted(ref_sorted: np.ndarray, cur_sorted: np.ndarray) -> float:
    """KS statistic D = sup |F_a − F_b| of two sorted samples, searching only the smaller one's values.

    Let ``b`` be the smaller sample, ``u_1 < … < u_m`` its distinct values and ``G_k`` its ECDF at ``u_k``
    (0 before ``u_1``). On ``[u_k, u_k+1)`` the ECDF of ``b`` is ``G_k`` while that of ``a`` rises from
    ``#a <= u_k`` to ``#a < u_k+1`` (over ``n_a``), so the supremum there is reached at one of those two
    ends; before ``u_1`` it is ``#a < u_1``. Two ``searchsorted`` of ``m`` values into ``a`` give all of it.
    """
    a, b = (ref_sorted, cur_sorted) if ref_sorted.shape[0] >= cur_sorted.shape[0] else (cur_sorted, ref_sorted)
    n_a, n_b = a.shape[0], b.shape[0]
    at_b = _last_of_ties(b)
    points = b[at_b]
    g = (np.flatnonzero(at_b) + 1) / n_b
    at_or_below = np.searchsorted(a, points, side="right") / n_a
    below = np.searchsorted(a, points, side="left") / n_a
    d = max(float(np.abs(at_or_below - g).max()), float(below[0]))
    if points.shape[0] > 1:
        d = max(d, float(np.abs(below[1:] - g[:-1]).max()))
    return d


def ks_sorted(ref_sorted: np.ndarray, cur_sorted: np.ndarray) -> tuple[float, float]:
    """KS statistic and two-sided p-value of two sorted, non-empty samples, as ``scipy.stats.ks_2samp``."""
    n1, n2 = ref_sorted.shape[0], cur_sorted.shape[0]
    if max(n1, n2) <= EXACT_KS_MAX_N:
        result = stats.ks_2samp(ref_sorted, cur_sorted)
        return float(result.statistic), float(result.pvalue)
    d = ks_statistic_sorted(ref_sorted, cur_sorted)
    m, n = sorted([float(n1), float(n2)], reverse=True)
    en = m * n / (m + n)
    return d, float(np.clip(stats.kstwo.sf(d, np.round(en)), 0.0, 1.0))


def ks_from_sketch(ecdf: np.ndarray, n_ref: int, cur_sorted: np.ndarray) -> tuple[float, float]:
    """Approximate KS of a current sample against a reference known only by its ECDF sketch.

    ``ecdf`` holds the reference quantiles at 0, 1/(k-1), …, 1. F_ref is the step function through them
    (at a run of equal quantiles, the last one's level, which keeps discrete columns right), so D is within
    about 1/(k-1) of the exact statistic; the p-value uses ``n_ref`` as the reference size.
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
    m, n = sorted([float(n_ref), float(n2)], reverse=True)
    return d, float(np.clip(stats.kstwo.sf(d, np.round(m * n / (m + n))), 0.0, 1.0))


def chi2(ref_counts: np.ndarray, cur_counts: np.ndarray) -> tuple[float, float, float]:
    """chi² statistic, p-value and Cramér's V of reference vs current counts over the same categories.

    Categories empty on both sides are left out (their expected count is 0). One category left: no
    evidence of a difference, statistic 0 and p-value 1.
    """
    table = np.vstack([np.asarray(ref_counts, dtype=np.int64), np.asarray(cur_counts, dtype=np.int64)])
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2:
        return 0.0, 1.0, 0.0
    result = stats.chi2_contingency(table)
    statistic = float(result.statistic)
    v = math.sqrt(statistic / table.sum()) if table.sum() else 0.0
    return statistic, float(result.pvalue), v
