"""The per-version decision threshold: chosen on validation scores, recorded, resolved by its readers.

Expected values come from scikit-learn's ``precision_recall_curve`` (every distinct score as a threshold,
``score >= t`` flagged) and ``f1_score``, not from the code under test.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import f1_score, precision_recall_curve

from mlops_model import (
    LEGACY_THRESHOLD,
    ExportedModelError,
    choose_threshold,
    f1_optimal_threshold,
    recorded_threshold,
    resolve_threshold,
)


def _sklearn_best(y: np.ndarray, s: np.ndarray) -> tuple[float, float]:
    """The F1-optimal threshold by scikit-learn (ties: the highest threshold) and its F1, moved to the midpoint
    between that score and the next lower distinct score (numpy's unique), as the platform records it."""
    p, r, t = precision_recall_curve(y, s)
    p, r = p[:-1], r[:-1]  # the last point (recall 0) has no threshold
    f1 = np.where(p + r > 0, 2 * p * r / np.where(p + r > 0, p + r, 1), 0.0)
    best = np.flatnonzero(np.isclose(f1, f1.max(), rtol=0, atol=1e-12))[-1]  # ascending t: the last is highest
    lower = np.unique(s)[np.unique(s) < t[best]]
    return float((t[best] + lower[-1]) / 2 if len(lower) else t[best]), float(f1[best])


def test_hand_built_scores_pick_the_cut_sklearn_picks() -> None:
    y = np.array([1, 1, 0, 1, 0, 0, 0, 1, 0, 0])
    s = np.array([0.9, 0.8, 0.7, 0.35, 0.3, 0.3, 0.2, 0.15, 0.1, 0.05])
    t, figures = f1_optimal_threshold(y, s)
    expected_t, expected_f1 = _sklearn_best(y, s)
    assert t == pytest.approx(expected_t) and figures["f1"] == pytest.approx(expected_f1)
    assert figures["f1"] == pytest.approx(f1_score(y, s >= t))
    # by hand: cutting at 0.35 flags 4 rows holding 3 of the 4 frauds: F1 = 2·3 / (4 + 4) = 0.75; the next lower
    # score is 0.3, so the threshold recorded is 0.325
    assert (t, figures["f1"], figures["precision"], figures["recall"]) == pytest.approx((0.325, 0.75, 0.75, 0.75))


def test_no_validation_row_sits_on_the_threshold_so_a_last_bit_difference_decides_the_same() -> None:
    """The row at the best cut, scored again with a last-bit difference (another batch size or CPU), is still
    flagged, and the row below it still not (on the old threshold, the cut itself, the first flipped)."""
    y = np.array([1, 1, 0, 1, 0, 0, 0, 1, 0, 0])
    s = np.array([0.9, 0.8, 0.7, 0.35, 0.3, 0.3, 0.2, 0.15, 0.1, 0.05])
    t, _ = f1_optimal_threshold(y, s)
    rescored = s.copy()
    rescored[3] = np.nextafter(0.35, 0.0)
    rescored[4] = np.nextafter(0.3, 1.0)
    assert ((rescored >= t) == (s >= t)).all() and not np.isin(t, s)
    assert f1_score(y, rescored >= t) == pytest.approx(0.75)
    only = np.array([0.4, 0.4])  # one distinct score: nothing lower, the cut itself
    assert f1_optimal_threshold(np.array([1, 0]), only)[0] == pytest.approx(0.4)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_calibrated_like_scores_match_sklearn_and_sit_far_below_half(seed: int) -> None:
    rng = np.random.default_rng(seed)
    s = rng.beta(0.5, 12, size=5000)  # probabilities of a rare class: most near 0
    y = (rng.random(5000) < s).astype(int)
    s = np.round(s, 3)  # ties, as isotonic scores have
    t, figures = f1_optimal_threshold(y, s)
    expected_t, expected_f1 = _sklearn_best(y, s)
    assert t == pytest.approx(expected_t) and figures["f1"] == pytest.approx(expected_f1)
    assert t < 0.5 and f1_score(y, s >= t) > f1_score(y, s >= 0.5)


def test_choose_threshold_records_the_criterion_and_the_validation_figures() -> None:
    rng = np.random.default_rng(3)
    s = rng.random(400)
    y = (rng.random(400) < s).astype(int)
    entry = choose_threshold(y, s, "f1")
    assert entry["criterion"] == "f1" and entry["rows"] == 400 and entry["positives"] == int(y.sum())
    assert entry["value"] == pytest.approx(_sklearn_best(y, s)[0])
    fixed = choose_threshold(y, s, "fixed", 0.3)
    assert fixed["value"] == 0.3 and fixed["f1"] == pytest.approx(f1_score(y, s >= 0.3))
    with pytest.raises(ExportedModelError, match="'youden'"):
        choose_threshold(y, s, "youden")
    with pytest.raises(ExportedModelError, match="positive"):
        f1_optimal_threshold(np.zeros(5), np.linspace(0, 1, 5))


def test_readers_use_the_recorded_threshold_and_name_an_override_or_the_legacy_fallback() -> None:
    meta = {"decision_threshold": {"value": 0.21, "criterion": "f1"}}
    own = resolve_threshold(meta, None, override_key="monitoring.decision_threshold", model="v3")
    assert (own.value, own.source, own.disagrees) == (0.21, "model", False)
    over = resolve_threshold(meta, 0.5, override_key="monitoring.decision_threshold", model="v3")
    assert (over.value, over.source, over.recorded, over.disagrees) == (0.5, "override", 0.21, True)
    assert "monitoring.decision_threshold=0.5" in over.note and "0.21" in over.note and "disagree" in over.note
    same = resolve_threshold(meta, 0.21, override_key="k", model="v3")
    assert not same.disagrees
    old = resolve_threshold({"kind": "tabular_mlp"}, None, override_key="k", model="v1")
    assert (old.value, old.source) == (LEGACY_THRESHOLD, "legacy") and "records no decision_threshold" in old.note
    assert recorded_threshold({}) is None
    with pytest.raises(ExportedModelError, match=r"1\.5"):
        recorded_threshold({"decision_threshold": {"value": 1.5}})


def test_reference_f1_is_the_recorded_validation_f1_at_the_recorded_threshold() -> None:
    from mlops_model import reference_f1

    meta = {"decision_threshold": {"value": 0.12, "criterion": "f1", "f1": 0.81}}
    own = reference_f1(resolve_threshold(meta, None, override_key="k", model="v3"), model="v3", fallback=0.6)
    assert (own.value, own.source, own.threshold) == (0.81, "model", 0.12)
    assert own.note == "v3's validation F1 0.8100 at its recorded threshold 0.12 (model.json decision_threshold.f1)"
    moved = reference_f1(resolve_threshold(meta, 0.3, override_key="monitoring.decision_threshold", model="v3"),
                         model="v3")
    assert moved.value == 0.81 and moved.note.endswith("; the realized F1 is scored at the override 0.3, not at "
                                                       "that threshold")
    legacy = reference_f1(resolve_threshold({}, None, override_key="k", model="v1"), model="v1", fallback=0.6,
                          fallback_what="val_f1")
    assert (legacy.value, legacy.source) == (0.6, "fallback") and "falling back to val_f1 0.6000" in legacy.note
    none = reference_f1(resolve_threshold({}, None, override_key="k", model="v1"), model="v1")
    assert (none.value, none.source) == (None, "none")
    with pytest.raises(ExportedModelError, match=r"decision_threshold\.f1 1\.5 is outside"):
        resolve_threshold({"decision_threshold": {"value": 0.2, "f1": 1.5}}, None, override_key="k")
