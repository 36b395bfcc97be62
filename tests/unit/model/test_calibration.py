"""Score calibration: fitted like scikit-learn / a direct likelihood fit, recorded in model.json, applied on load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.optimize import minimize
from sklearn.isotonic import IsotonicRegression

from mlops_model import (
    Calibration,
    ExportedModel,
    ExportedModelError,
    build_tabular_mlp,
    fit_calibration,
    save_exported,
    statistics,
)

ARCH = {"input_dim": 3, "hidden_sizes": [4], "dropout": 0.0}
ENCODER = {"version": 1, "input_dim": 3, "derived": [], "categorical": [],
           "numeric": [{"name": f"f{i}", "log": False, "mean": 0.0, "std": 1.0} for i in range(3)]}


def _miscalibrated(n: int = 4000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.beta(0.7, 3.0, n)
    return np.sqrt(p), (rng.random(n) < p).astype(float)  # scores inflated like a class-weighted network's


def test_isotonic_matches_sklearn_and_lowers_ece() -> None:
    s, y = _miscalibrated()
    cal = fit_calibration(s[:2000], y[:2000], "isotonic")
    iso = IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(s[:2000], y[:2000])
    np.testing.assert_allclose(cal.apply(s[2000:]), iso.predict(s[2000:]), atol=1e-12)
    before = statistics.expected_calibration_error(y[2000:], s[2000:])
    after = statistics.expected_calibration_error(y[2000:], cal.apply(s[2000:]))
    assert before > 0.1 and after < before / 3


def test_platt_is_the_maximum_likelihood_logistic_fit_on_the_logit() -> None:
    s, y = _miscalibrated(seed=1)
    cal = fit_calibration(s, y, "platt")
    z = np.log(s / (1 - s))

    def nll(ab: np.ndarray) -> float:
        q = np.clip(1 / (1 + np.exp(-(ab[0] * z + ab[1]))), 1e-12, 1 - 1e-12)
        return float(-np.sum(y * np.log(q) + (1 - y) * np.log(1 - q)))

    best = minimize(nll, np.array([1.0, 0.0]), method="Nelder-Mead", options={"xatol": 1e-8, "fatol": 1e-10}).x
    assert (cal.a, cal.b) == pytest.approx(tuple(best), abs=1e-3)


def test_one_class_and_unknown_method_are_refused() -> None:
    with pytest.raises(ExportedModelError, match="both classes"):
        fit_calibration([0.1, 0.2], [0, 0], "isotonic")
    with pytest.raises(ExportedModelError, match=r"'beta'; expected one of \('isotonic', 'platt'\)"):
        fit_calibration([0.1, 0.2], [0, 1], "beta")


def _export(folder: Path, calibration: dict | None) -> Path:
    torch.manual_seed(0)
    meta = {"kind": "tabular_mlp", "architecture": ARCH, "features": {"encoder": ENCODER}}
    if calibration is not None:
        meta["calibration"] = calibration
    return save_exported(folder, build_tabular_mlp(ARCH).state_dict(), meta)


def test_exported_model_applies_its_recorded_calibration(tmp_path: Path) -> None:
    x = np.random.default_rng(0).normal(size=(50, 3)).astype(np.float32)
    old = ExportedModel.load(_export(tmp_path / "old", None))  # an export from before calibration existed
    assert old.calibration is None
    raw = old.score_encoded(x)
    cal = Calibration("platt", a=0.5, b=-1.0)
    new = ExportedModel.load(_export(tmp_path / "new", cal.to_dict()))
    expected = 1 / (1 + np.exp(-(0.5 * np.log(raw / (1 - raw)) - 1.0)))  # by hand, from the raw scores
    np.testing.assert_allclose(new.score_encoded(x), expected, rtol=1e-9)


def test_a_bad_calibration_entry_is_refused_on_load(tmp_path: Path) -> None:
    folder = _export(tmp_path / "m", {"method": "isotonic", "x": [0.5, 0.1], "y": [0.0, 1.0]})
    with pytest.raises(ExportedModelError, match="x non-decreasing"):
        ExportedModel.load(folder)
    folder = _export(tmp_path / "n", {"method": "temperature"})
    with pytest.raises(ExportedModelError, match=r"calibration method 'temperature'"):
        ExportedModel.load(folder)
