"""The reference profile: quantile edges equal numpy's, counts match a hand-binned count, JSON round trip, errors."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from mlops_core.profile import (
    ProfileError,
    bin_counts,
    build_reference_profile,
    check_profile,
    quantile_edges,
    quantiles_of_sorted,
)


def _frame(n: int = 5000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "amount": rng.lognormal(3, 1, n),
            "count": rng.integers(0, 4, n),
            "channel": rng.choice(["web", "pos", "app"], n, p=[0.5, 0.3, 0.2]),
        }
    )


def test_quantiles_match_numpy_bit_for_bit() -> None:
    rng = np.random.default_rng(1)
    probs = np.linspace(0, 1, 101)
    for values in (rng.normal(size=997), rng.integers(0, 3, 50).astype(float), np.array([4.0])):
        assert np.array_equal(quantiles_of_sorted(np.sort(values), probs), np.quantile(values, probs))


def test_edges_and_counts_against_a_hand_binned_count() -> None:
    values = np.array([5.0, 1.0, 3.0, 2.0, 4.0, 9.0, 7.0, 6.0, 8.0, 10.0])
    edges = quantile_edges(np.sort(values), 5)
    assert edges.tolist() == pytest.approx(np.quantile(values, [0.2, 0.4, 0.6, 0.8]).tolist())
    # bin i holds edges[i-1] <= v < edges[i]; count by hand with plain comparisons
    bounds = [-np.inf, *edges.tolist(), np.inf]
    by_hand = [sum(1 for v in values if lo <= v < hi) for lo, hi in itertools.pairwise(bounds)]
    assert bin_counts(np.sort(values), edges).tolist() == by_hand
    assert sum(by_hand) == len(values)


def test_duplicate_edges_merge_for_discrete_columns() -> None:
    values = np.sort(np.array([0, 0, 0, 0, 0, 0, 1, 1, 2, 3], dtype=float))
    edges = quantile_edges(values, 10)
    assert len(edges) == len(set(edges.tolist()))
    assert bin_counts(values, edges).sum() == 10


def test_profile_contents_and_json_round_trip() -> None:
    df = _frame()
    df.loc[:9, "amount"] = np.nan
    df.loc[:4, "channel"] = None
    scores = np.linspace(0, 1, len(df))
    prof = build_reference_profile(df, ["amount", "count"], ["channel"], 10, scores=scores)
    back = check_profile(json.loads(json.dumps(prof)))
    amount = back["numeric"]["amount"]
    assert amount["missing"] == 10 and amount["count"] == len(df) - 10
    assert sum(amount["counts"]) == len(df) - 10
    assert len(amount["counts"]) == len(amount["edges"]) + 1 == 10
    finite = df["amount"].dropna().to_numpy()
    assert amount["mean"] == pytest.approx(finite.mean())
    assert amount["quantiles"]["p50"] == pytest.approx(np.median(finite))
    assert len(amount["ecdf"]) == 1001 and amount["ecdf"][0] == finite.min() and amount["ecdf"][-1] == finite.max()
    channel = back["categorical"]["channel"]
    expected = df["channel"].dropna().value_counts().to_dict()
    assert channel["counts"] == expected and channel["missing"] == 5 and channel["other_count"] == 0
    assert back["score"]["count"] == len(df)
    assert back["score"]["counts"] == [500] * 10  # evenly spread scores fill each decile exactly


def test_rare_categories_are_merged_not_dropped() -> None:
    df = pd.DataFrame({"c": ["a"] * 5 + ["b"] * 3 + ["c", "d"]})
    prof = build_reference_profile(df, [], ["c"], max_categories=2)
    assert prof["categorical"]["c"]["counts"] == {"a": 5, "b": 3}
    assert prof["categorical"]["c"]["other_count"] == 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"numeric": ["nope"], "categorical": []}, "'nope'"),
        ({"numeric": ["channel"], "categorical": []}, "'channel' has dtype"),
        ({"numeric": ["amount"], "categorical": ["amount"]}, "numeric and as categorical"),
        ({"numeric": ["amount"], "categorical": [], "n_bins": 1}, "n_bins=1"),
        ({"numeric": [], "categorical": [], "scores": [0.1]}, "one score per row"),
    ],
)
def test_bad_input_is_named(kwargs: dict, match: str) -> None:
    with pytest.raises(ProfileError, match=match):
        build_reference_profile(_frame(100), **kwargs)


def test_infinite_and_empty_are_refused() -> None:
    with pytest.raises(ProfileError, match="infinite"):
        build_reference_profile(pd.DataFrame({"x": [1.0, np.inf]}), ["x"], [])
    with pytest.raises(ProfileError, match="no non-missing"):
        build_reference_profile(pd.DataFrame({"x": [np.nan, np.nan]}), ["x"], [])
    with pytest.raises(ProfileError, match="version"):
        check_profile({"numeric": {}, "categorical": {}, "version": 99})


def test_labels_and_metrics_are_recorded() -> None:
    df = _frame(400).assign(y=[1] * 40 + [0] * 360)
    prof = build_reference_profile(df, ["amount"], [], labels="y", metrics={"f1": 0.9})
    assert prof["metrics"] == {"f1": 0.9, "positive_rate": 0.1}
    with pytest.raises(ProfileError, match="0/1"):
        build_reference_profile(df, ["amount"], [], labels=[2] * 400)
