"""KS from sorted samples and the one quantile-bin definition.

KS (:func:`ks_sorted`) against ``scipy.stats.ks_2samp`` itself: statistic and p-value to 1e-12, on hand-built
cases, ties, tiny samples and both of scipy's methods (exact up to 10,000 values a side, asymptotic above).
Quantile bins against ``numpy.quantile`` by hand.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from mlops_core import build_reference_profile
from mlops_model import StatisticsError
from mlops_model.statistics import KS_EXACT_MAX_N, ks, ks_sorted, quantile_bin_counts


def _check(a: np.ndarray, b: np.ndarray) -> None:
    expected = stats.ks_2samp(a, b)
    d, p = ks_sorted(np.sort(a), np.sort(b))
    assert d == pytest.approx(float(expected.statistic), abs=1e-12)
    assert p == pytest.approx(float(expected.pvalue), abs=1e-12)
    assert ks(a, b) == (d, p)


def test_hand_built_case() -> None:
    # ref {1, 2, 3, 4}, cur {3, 4, 5, 6}: at x = 2 F_ref = 1/2 and F_cur = 0, the largest gap: D = 0.5
    a, b = np.array([1.0, 2.0, 3.0, 4.0]), np.array([3.0, 4.0, 5.0, 6.0])
    d, _ = ks_sorted(a, b)
    assert d == 0.5
    _check(a, b)


def test_asymptotic_hand_built_case() -> None:
    # 20,000 values 0..19,999 against the same shifted by 5,000: D = 5,000/20,000 exactly, p from kstwo
    a = np.arange(20_000, dtype=np.float64)
    d, p = ks_sorted(a, a + 5_000)
    assert d == pytest.approx(0.25, abs=1e-15)
    assert p == pytest.approx(float(stats.kstwo.sf(d, 10_000)), abs=1e-12)
    _check(a, a + 5_000)


@pytest.mark.parametrize(("n1", "n2"), [(1, 1), (1, 3), (2, 5), (7, 7), (30, 11)])
def test_tiny_samples(n1: int, n2: int) -> None:
    rng = np.random.default_rng(100 * n1 + n2)
    _check(rng.normal(size=n1), rng.normal(size=n2))
    _check(rng.integers(0, 2, n1).astype(float), rng.integers(0, 2, n2).astype(float))


@pytest.mark.parametrize(
    ("n1", "n2", "kind"),
    [(1_000_000, 200_000, "normal"), (300_000, 50_000, "ties"), (200_000, 30_000, "poisson"),
     (50_000, 3, "normal"), (3, 50_000, "ties"), (KS_EXACT_MAX_N + 1, KS_EXACT_MAX_N, "normal"),
     (KS_EXACT_MAX_N, KS_EXACT_MAX_N, "ties"), (40_000, 40_000, "same")],
)
def test_random_cases_equal_scipy(n1: int, n2: int, kind: str) -> None:
    rng = np.random.default_rng(n1 * 7 + n2)
    if kind == "ties":
        a, b = rng.integers(0, 6, n1).astype(float), rng.integers(0, 7, n2).astype(float)
    elif kind == "poisson":
        a, b = rng.poisson(3.0, n1).astype(float), rng.poisson(3.1, n2).astype(float)
    elif kind == "same":
        a = rng.normal(size=n1)
        b = rng.permutation(a)
    else:
        a, b = rng.normal(0, 1, n1), rng.normal(0.01, 1.02, n2)
    _check(a, b)


def test_disjoint_samples() -> None:
    _check(np.arange(20_000.0), np.arange(20_000.0) + 1e6)
    _check(np.arange(20_000.0) + 1e6, np.arange(20_000.0))


def test_bad_input_is_named() -> None:
    with pytest.raises(StatisticsError, match="NaN in the current sample"):
        ks([1.0, 2.0], [1.0, float("nan")])
    with pytest.raises(StatisticsError, match="values on both sides, got 3 and 0"):
        ks_sorted(np.array([1.0, 2.0, 3.0]), np.array([]))


def test_quantile_bins_are_the_profiles_pinned_by_hand() -> None:
    # 1..10 in 4 bins: numpy.quantile at 0.25/0.5/0.75 gives 3.25, 5.5, 7.75 (linear), so [1,2,3] [4,5] [6,7] [8,9,10]
    values = np.arange(1.0, 11.0)
    assert np.quantile(values, [0.25, 0.5, 0.75]).tolist() == [3.25, 5.5, 7.75]
    ref, cur = quantile_bin_counts(values, [3.25, 3.2, 100.0, -5.0], 4)
    assert ref.tolist() == [3, 2, 2, 3]
    assert cur.tolist() == [2, 1, 0, 1]  # a value on an edge belongs to the bin above it
    # all inner quantiles equal (ties): one edge, two bins
    ref, cur = quantile_bin_counts([0.0, 0.0, 0.0, 0.0, 1.0], [0.0, -1.0, 2.0], 4)
    assert (ref.tolist(), cur.tolist()) == ([0, 5], [1, 2])
    profile = build_reference_profile(pd.DataFrame({"x": values}), ["x"], [], n_bins=4)
    assert profile["numeric"]["x"]["edges"] == [3.25, 5.5, 7.75]
    assert profile["numeric"]["x"]["counts"] == [3, 2, 2, 3]


def test_quantile_bins_refuse_bad_input() -> None:
    with pytest.raises(StatisticsError, match="n_bins=1"):
        quantile_bin_counts([1.0, 2.0], [1.0], 1)
    with pytest.raises(StatisticsError, match="NaN"):
        quantile_bin_counts([1.0, float("nan")], [1.0], 4)


def test_quantile_bin_edges_are_at_k_over_bins() -> None:
    # np.linspace(0, 1, 11)[3] is 0.30000000000000004, not 0.3: with a jump after the 4th value its quantile
    # lands 4e-10 above 3.0, and 3.0 fell in the bin below (the old canary check), unlike the profile's bins
    values = np.array([0.0, 1.0, 2.0, 3.0, 1e6, 1e6 + 1, 1e6 + 2, 1e6 + 3, 1e6 + 4, 1e6 + 5, 1e6 + 6])
    assert float(np.quantile(values, 3 / 10)) == 3.0
    _, cur = quantile_bin_counts(values, [3.0], 10)
    assert int(np.flatnonzero(cur)[0]) == 3  # on the edge at p = 0.3: the bin above it, [3.0, 1e6)
