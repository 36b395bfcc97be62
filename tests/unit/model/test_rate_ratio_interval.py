"""``statistics.rate_ratio_interval`` against scipy's own bootstrap of the same statistic, and by arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from mlops_model import StatisticsError, statistics


def test_the_ratio_is_of_sums_and_equal_rates_collapse_the_interval() -> None:
    # A: 10 tokens in 1 s and 30 in 1 s → 20 tokens/s; B: 5 tokens in 0.5 s, 15 in 0.5 s → 20 tokens/s.
    ratio, low, high = statistics.rate_ratio_interval([10, 30], [1, 1], [5, 15], [0.5, 0.5])
    assert ratio == pytest.approx(1.0)
    # every unit of B decodes at 40 tokens/s, every unit of A at 20: each resample's ratio is exactly 2
    assert statistics.rate_ratio_interval([2, 4], [0.1, 0.2], [4, 8], [0.1, 0.2])[1:] == pytest.approx((2.0, 2.0))
    assert low <= 1.0 <= high


def test_the_interval_matches_scipys_percentile_bootstrap() -> None:
    rng = np.random.default_rng(7)
    tokens_a, tokens_b = rng.integers(2, 40, 60).astype(float), rng.integers(2, 40, 80).astype(float)
    secs_a = tokens_a / (50 * np.exp(rng.normal(0, 0.5, 60)))
    secs_b = tokens_b / (40 * np.exp(rng.normal(0, 0.5, 80)))
    ratio, low, high = statistics.rate_ratio_interval(tokens_a, secs_a, tokens_b, secs_b, level=0.9,
                                                      resamples=20_000, seed=1)

    def stat(ia: np.ndarray, ib: np.ndarray) -> float:  # scipy resamples the unit indices of each sample
        ia, ib = ia.astype(int), ib.astype(int)
        return (tokens_b[ib].sum() / secs_b[ib].sum()) / (tokens_a[ia].sum() / secs_a[ia].sum())

    ref = stats.bootstrap((np.arange(60.0), np.arange(80.0)), stat, vectorized=False, n_resamples=20_000,
                          confidence_level=0.9, method="percentile", random_state=2)
    assert ratio == pytest.approx((tokens_b.sum() / secs_b.sum()) / (tokens_a.sum() / secs_a.sum()))
    assert low == pytest.approx(ref.confidence_interval.low, rel=0.02)
    assert high == pytest.approx(ref.confidence_interval.high, rel=0.02)


@pytest.mark.parametrize(("args", "kwargs", "match"), [
    (([], [], [1], [1]), {}, "sample A: 0 numerators"),
    (([1, 2], [1], [1], [1]), {}, "sample A: 2 numerators and 1 denominators"),
    (([1], [1], [1], [0]), {}, "sample B: the denominators sum to 0"),
    (([1], [-1], [1], [1]), {}, "finite and >= 0"),
    (([1], [1], [1], [1]), {"level": 1.0}, "level must lie in"),
])
def test_bad_samples_are_refused_by_name(args: tuple, kwargs: dict, match: str) -> None:
    with pytest.raises(StatisticsError, match=match):
        statistics.rate_ratio_interval(*args, **kwargs)
