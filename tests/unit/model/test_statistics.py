"""The shared statistics against independent sources: scipy for KS and chi², sklearn-free hand arithmetic for PSI
and the binary metrics."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from mlops_core import bin_counts, quantile_edges
from mlops_model.errors import StatisticsError
from mlops_model.statistics import (
    binary_metrics,
    chi2,
    ks,
    ks_from_sketch,
    ks_sorted,
    psi,
    quantile_bin_counts,
    roc_auc,
)


def test_psi_by_hand() -> None:
    ref, cur = [50, 30, 20], [40, 30, 30]
    # shares 0.5/0.3/0.2 vs 0.4/0.3/0.3
    expected = (0.4 - 0.5) * math.log(0.4 / 0.5) + 0 + (0.3 - 0.2) * math.log(0.3 / 0.2)
    assert psi(np.array(ref), np.array(cur)) == pytest.approx(expected, rel=1e-12)
    assert psi(np.array(ref), np.array(ref)) == 0.0


def test_psi_floors_an_empty_bin_only() -> None:
    ref, cur = np.array([10, 10, 0]), np.array([5, 10, 5])
    expected = (0.25 - 0.5) * math.log(0.25 / 0.5) + 0 + (0.25 - 1e-4) * math.log(0.25 / 1e-4)
    assert psi(ref, cur) == pytest.approx(expected, rel=1e-12)
    # a tiny non-empty share is used as it is, not raised to the floor
    ref, cur = np.array([999_999, 1]), np.array([500_000, 500_000])
    expected = (0.5 - 0.999999) * math.log(0.5 / 0.999999) + (0.5 - 1e-6) * math.log(0.5 / 1e-6)
    assert psi(ref, cur) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("n1", "n2", "kind"),
    [(300, 200, "normal"), (8000, 3000, "ties"), (60_000, 15_000, "normal"), (50_000, 20_000, "ties"),
     (20_000, 7, "normal")],
)
def test_ks_equals_scipy(n1: int, n2: int, kind: str) -> None:
    rng = np.random.default_rng(n1 + n2)
    if kind == "ties":
        a, b = rng.integers(0, 6, n1).astype(float), rng.integers(0, 7, n2).astype(float)
    else:
        a, b = rng.normal(0, 1, n1), rng.normal(0.05, 1.1, n2)
    expected = stats.ks_2samp(a, b)
    d, p = ks(a, b)
    assert d == pytest.approx(float(expected.statistic), abs=1e-12)
    assert p == pytest.approx(float(expected.pvalue), rel=1e-9, abs=1e-300)


def _ks_case(rng: np.random.Generator, case: str, n1: int, n2: int) -> tuple[np.ndarray, np.ndarray]:
    if case == "ties":
        return rng.integers(0, 9, n1).astype(float), rng.integers(2, 12, n2).astype(float)
    if case == "disjoint":  # every reference value below every current one: D = 1
        return rng.normal(0, 1, n1), rng.normal(0, 1, n2) + 100
    if case == "interleaved":  # the same few values on both sides, one shifted by half a step
        return rng.integers(0, 4, n1) * 1.0, rng.integers(0, 4, n2) * 1.0 + rng.choice([0.0, 0.5], n2)
    return rng.lognormal(0, 1, n1), rng.lognormal(0.02, 1, n2)


@pytest.mark.parametrize("case", ["continuous", "ties", "disjoint", "interleaved"])
def test_ks_sorted_is_scipy_to_the_bit_for_either_larger_side(case: str) -> None:
    """D and the p-value equal ks_2samp's exactly, whichever sample is the smaller one (the fast path walks the
    smaller sample's distinct values) and on both sides of the exact/asymptotic switch (10,000)."""
    rng = np.random.default_rng(7)
    for n1, n2 in [(200_000, 11_000), (11_000, 200_000), (10_001, 10_001), (12_000, 9_000), (9_000, 3)]:
        a, b = _ks_case(rng, case, n1, n2)
        expected = stats.ks_2samp(a, b)
        d, p = ks_sorted(np.sort(a), np.sort(b))
        assert (d, p) == (float(expected.statistic), float(expected.pvalue)), (case, n1, n2)


def test_ks_sorted_refuses_an_empty_side() -> None:
    with pytest.raises(StatisticsError, match="KS needs values on both sides, got 0 and 3"):
        ks_sorted(np.array([]), np.array([1.0, 2.0, 3.0]))


def test_ks_sketch_is_within_a_thousandth() -> None:
    rng = np.random.default_rng(3)
    for a, b in [
        (rng.normal(0, 1, 50_000), rng.normal(0.1, 1, 4000)),
        (rng.poisson(2, 50_000).astype(float), rng.poisson(2.3, 4000).astype(float)),
    ]:
        sketch = np.quantile(a, np.linspace(0, 1, 1001))
        d, _ = ks_from_sketch(sketch, len(a), np.sort(b))
        assert d == pytest.approx(float(stats.ks_2samp(a, b).statistic), abs=2e-3)


def test_chi2_equals_scipy_on_a_crosstab() -> None:
    rng = np.random.default_rng(5)
    ref = rng.choice(list("abcd"), 5000, p=[0.4, 0.3, 0.2, 0.1])
    cur = rng.choice(list("abcde"), 1000, p=[0.3, 0.3, 0.2, 0.1, 0.1])
    frame = pd.DataFrame({"side": ["ref"] * len(ref) + ["cur"] * len(cur), "v": np.concatenate([ref, cur])})
    table = pd.crosstab(frame["side"], frame["v"]).loc[["ref", "cur"]]
    expected = stats.chi2_contingency(table.to_numpy())
    stat, p, v = chi2(table.loc["ref"].to_numpy(), table.loc["cur"].to_numpy())
    assert stat == pytest.approx(expected.statistic, rel=1e-12)
    assert p == pytest.approx(expected.pvalue, rel=1e-9)
    assert v == pytest.approx(math.sqrt(expected.statistic / 6000), rel=1e-12)


def test_chi2_with_one_category_is_no_evidence() -> None:
    assert chi2(np.array([10, 0]), np.array([5, 0])) == (0.0, 1.0, 0.0)


def test_canary_and_drift_psi_are_one_definition() -> None:
    """A bin rarer than the floor is used as measured by both checks (the canary check once floored it)."""
    from mlops_delivery.metrics import population_stability_index

    expected = np.arange(100_000) / 100_000  # quantile bins of 0.5: two bins of 50,000
    actual = np.concatenate([np.full(99_999, 0.1), [0.9]])  # shares 0.99999 and 0.00001 (below the 1e-4 floor)
    hand = (0.99999 - 0.5) * math.log(0.99999 / 0.5) + (0.00001 - 0.5) * math.log(0.00001 / 0.5)
    assert population_stability_index(expected, actual, bins=2) == pytest.approx(hand, rel=1e-12)
    assert psi(*quantile_bin_counts(expected, actual, 2)) == pytest.approx(hand, rel=1e-12)


def test_binary_metrics_by_hand() -> None:
    y = np.array([0, 0, 1, 1, 0, 1])
    s = np.array([0.1, 0.6, 0.6, 0.9, 0.2, 0.4])
    m = binary_metrics(y, s, threshold=0.5)
    # predicted positive: rows 1, 2, 3 -> tp 2 (rows 2, 3), fp 1 (row 1), fn 1 (row 5)
    assert (m["precision"], m["recall"], m["f1"]) == pytest.approx((2 / 3, 2 / 3, 2 / 3))
    # Mann-Whitney by hand: pairs (pos, neg) with pos > neg count 1, ties 1/2
    pos, neg = s[y == 1], s[y == 0]
    u = sum(1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg)
    assert roc_auc(y, s) == pytest.approx(u / 9)
    assert math.isnan(roc_auc(np.zeros(3), np.arange(3.0)))


def test_quantile_bins_are_the_reference_profiles_bins() -> None:
    """One bin definition: the canary's and the LM drift's quantile bins are a profile's edges and counts.

    By hand: 0…9 at k/5 (numpy's linear quantiles) gives edges 1.8, 3.6, 5.4, 7.2; a value on an edge belongs
    to the bin above it."""
    ref, cur = np.arange(10.0), np.array([0.0, 2.0, 2.0, 9.0, 100.0])
    assert np.quantile(ref, [0.2, 0.4, 0.6, 0.8]) == pytest.approx([1.8, 3.6, 5.4, 7.2], abs=1e-12)
    got_ref, got_cur = quantile_bin_counts(ref, cur, 5)
    assert got_ref.tolist() == [2, 2, 2, 2, 2]
    assert got_cur.tolist() == [1, 2, 0, 0, 2]
    ties_ref, ties_cur = quantile_bin_counts([1, 1, 1, 1, 2, 2, 3, 3, 3, 3], [2, 2], 2)
    assert (ties_ref.tolist(), ties_cur.tolist()) == ([4, 6], [0, 2])
    rng = np.random.default_rng(3)
    sample = rng.lognormal(0, 1, 5000)
    ordered = np.sort(sample)
    profile_counts = bin_counts(ordered, quantile_edges(ordered, 10))
    assert quantile_bin_counts(sample, sample[:10], 10)[0].tolist() == profile_counts.tolist()
    with pytest.raises(StatisticsError, match="n_bins=1"):
        quantile_bin_counts(sample, sample, 1)
