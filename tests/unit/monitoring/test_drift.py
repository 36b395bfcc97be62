"""compare(): PSI by hand, KS and chi² equal to scipy, profile vs frame, missing/unseen buckets, levels, errors."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from mlops_config import MonitoringConfig
from mlops_core.profile import build_reference_profile
from mlops_monitoring import MonitoringError, compare


def _frame(n: int, rng: np.random.Generator, *, shift: float = 0.0, web: float = 0.5) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "amount": rng.lognormal(3 + shift, 1, n),
            "user_txn_count_1h": rng.poisson(2, n),
            "hour": rng.integers(0, 24, n),
            "channel": rng.choice(["web", "pos", "app"], n, p=[web, (1 - web) * 0.6, (1 - web) * 0.4]),
            "score": rng.beta(1, 20, n),
        }
    )


def _hand_psi(ref: list[float], cur: list[float], n_bins: int) -> float:
    """PSI with the documented definition, computed with plain Python (no code under test)."""
    edges = sorted(set(np.quantile(ref, [k / n_bins for k in range(1, n_bins)]).tolist()))
    bounds = [-math.inf, *edges, math.inf]
    total = 0.0
    for lo, hi in itertools.pairwise(bounds):
        r = sum(lo <= v < hi for v in ref) / len(ref) or 1e-4
        c = sum(lo <= v < hi for v in cur) / len(cur) or 1e-4
        total += (c - r) * math.log(c / r)
    return total


def test_numeric_column_psi_ks_by_hand_and_scipy() -> None:
    rng = np.random.default_rng(11)
    ref = pd.DataFrame({"x": rng.normal(0, 1, 2000)})
    cur = pd.DataFrame({"x": np.concatenate([rng.normal(0.4, 1, 380), [50.0, 60.0]])})  # two beyond the top edge
    col = compare(ref, cur, numeric=["x"], categorical=[]).columns["x"]
    assert col.psi == pytest.approx(_hand_psi(ref["x"].tolist(), cur["x"].tolist(), 10), rel=1e-12)
    expected = stats.ks_2samp(ref["x"], cur["x"])
    assert col.method == "ks"
    assert col.statistic == pytest.approx(expected.statistic, abs=1e-12)
    assert col.p_value == pytest.approx(expected.pvalue, rel=1e-9)


def test_categorical_column_chi2_equals_scipy_and_psi_has_other_bucket() -> None:
    ref = pd.DataFrame({"c": ["a"] * 60 + ["b"] * 30 + ["c"] * 10})
    cur = pd.DataFrame({"c": ["a"] * 20 + ["b"] * 10 + ["z"] * 10})  # "z" is unseen: goes to "other"
    col = compare(ref, cur, numeric=[], categorical=["c"]).columns["c"]
    # PSI buckets a, b, c, other: ref .6/.3/.1/0→1e-4, cur .5/.25/0→1e-4/.25
    by_hand = sum((c - r) * math.log(c / r) for r, c in [(0.6, 0.5), (0.3, 0.25), (0.1, 1e-4), (1e-4, 0.25)])
    assert col.psi == pytest.approx(by_hand, rel=1e-12)
    table = pd.crosstab(pd.Series(["r"] * 100 + ["s"] * 40), pd.concat([ref["c"], cur["c"]], ignore_index=True))
    expected = stats.chi2_contingency(table.to_numpy())
    assert col.method == "chi2"
    assert col.statistic == pytest.approx(expected.statistic, rel=1e-12)
    assert col.p_value == pytest.approx(expected.pvalue, rel=1e-9)
    assert col.effect_size == pytest.approx(math.sqrt(expected.statistic / 140), rel=1e-12)


def test_missing_values_get_their_own_bucket() -> None:
    ref = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0] * 25, "c": ["a", "b"] * 50})
    cur = pd.DataFrame({"x": [1.0, 2.0, None, None] * 25, "c": ["a", None] * 50})
    report = compare(ref, cur, numeric=["x"], categorical=["c"])
    x = report.columns["x"]
    assert (x.missing_reference, x.missing_current, x.n_current) == (0, 50, 50)
    # the four values fall in four quantile bins: ref .25 each + missing 0; cur .25, .25, 0, 0 + missing .5
    by_hand = sum((c - r) * math.log(c / r) for r, c in [(0.25, 0.25), (0.25, 0.25), (0.25, 1e-4), (0.25, 1e-4),
                                                          (1e-4, 0.5)])
    assert x.psi == pytest.approx(by_hand, rel=1e-12)
    c = report.columns["c"]
    by_hand = sum((cc - r) * math.log(cc / r) for r, cc in [(0.5, 0.5), (0.5, 1e-4), (1e-4, 1e-4), (1e-4, 0.5)])
    assert c.psi == pytest.approx(by_hand, rel=1e-12)


def test_to_dict_shape_and_json() -> None:
    rng = np.random.default_rng(1)
    doc = json.loads(json.dumps(compare(_frame(3000, rng), _frame(1000, rng)).to_dict()))
    assert {"columns", "level"} <= set(doc)
    assert set(doc["columns"]) == {"amount", "user_txn_count_1h", "hour", "channel", "score"}
    for col in doc["columns"].values():
        assert {"method", "statistic", "p_value", "psi", "drifted", "effect_size"} <= set(col)
    assert doc["level"] == "OK" and doc["reasons"] == []


def test_profile_and_frame_agree() -> None:
    rng = np.random.default_rng(2)
    ref, cur = _frame(20_000, rng), _frame(3000, rng, shift=0.3, web=0.3)
    profile = build_reference_profile(ref, ["amount", "user_txn_count_1h", "hour"], ["channel"], scores="score")
    by_frame = compare(ref, cur, numeric=["amount", "user_txn_count_1h", "hour"], categorical=["channel"])
    by_profile = compare(json.loads(json.dumps(profile)), cur)
    assert by_profile.level == by_frame.level
    for name, col in by_frame.columns.items():
        other = by_profile.columns[name]
        assert other.psi == pytest.approx(col.psi, rel=1e-9), name
        assert other.statistic == pytest.approx(col.statistic, abs=2e-3 if col.method == "ks" else 1e-9), name
    assert by_profile.columns["amount"].method == "ks_sketch"


@pytest.mark.parametrize(
    ("shift", "web", "level", "culprit"),
    [(0.0, 0.5, "OK", None), (0.6, 0.5, "CRITICAL", "amount"), (0.0, 0.25, "WARNING", "channel")],
)
def test_levels_follow_the_policy(shift: float, web: float, level: str, culprit: str | None) -> None:
    rng = np.random.default_rng(3)
    keys = MonitoringConfig(key_features=("amount",))  # a key feature's critical drift is CRITICAL; the rest WARNING
    report = compare(_frame(20_000, rng), _frame(5000, rng, shift=shift, web=web), keys)
    assert report.level == level
    if culprit:
        assert report.columns[culprit].drifted
        assert culprit in report.reasons[0]


def test_non_key_feature_above_critical_is_only_warning() -> None:
    rng = np.random.default_rng(4)
    ref, cur = _frame(10_000, rng), _frame(3000, rng)
    cur["hour"] = rng.integers(0, 6, len(cur))  # hour collapses to the night: huge PSI on a non-key column
    report = compare(ref, cur)
    assert report.columns["hour"].psi > 0.2
    assert report.level == "WARNING"
    key = compare(ref, cur, MonitoringConfig(key_features=("hour",)))
    assert key.level == "CRITICAL"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"numeric": ["nope"], "categorical": []}, "'nope'"),
        ({"numeric": ["channel"], "categorical": []}, "'channel' has dtype"),
        ({"numeric": ["amount"], "categorical": ["amount"]}, "numeric and as categorical"),
    ],
)
def test_bad_input_is_named(kwargs: dict, match: str) -> None:
    rng = np.random.default_rng(5)
    with pytest.raises(MonitoringError, match=match):
        compare(_frame(500, rng), _frame(500, rng), **kwargs)


def test_empty_and_missing_columns_are_refused() -> None:
    rng = np.random.default_rng(6)
    ref = _frame(500, rng)
    with pytest.raises(MonitoringError, match="no rows"):
        compare(ref, ref.iloc[:0])
    with pytest.raises(MonitoringError, match=r"\['hour'\] are not in the current data"):
        compare(ref, ref.drop(columns=["hour"]))
    with pytest.raises(MonitoringError, match="datetime"):
        compare(ref.assign(ts=pd.Timestamp("2026-01-01")), ref)
    with pytest.raises(MonitoringError, match="not a reference profile"):
        compare({"numeric": {}}, ref)


def test_inputs_are_left_untouched() -> None:
    rng = np.random.default_rng(7)
    ref, cur = _frame(2000, rng), _frame(500, rng, shift=0.3)
    ref.loc[:5, "amount"] = np.nan
    before = (ref.copy(), cur.copy())
    compare(ref, cur)
    pd.testing.assert_frame_equal(ref, before[0])
    pd.testing.assert_frame_equal(cur, before[1])
