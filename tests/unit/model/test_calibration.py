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
    load_exported,
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


def _logits(x: np.ndarray) -> np.ndarray:
    """The exported network's float32 logits, by a forward pass of its own (what the export must fold Platt into)."""
    torch.manual_seed(0)  # the weights _export saved
    net = build_tabular_mlp(ARCH).eval()
    with torch.no_grad():
        return net(torch.from_numpy(x)).reshape(-1).numpy()


def test_exported_model_applies_its_recorded_calibration(tmp_path: Path) -> None:
    x = np.random.default_rng(0).normal(size=(50, 3)).astype(np.float32)
    old = ExportedModel.load(_export(tmp_path / "old", None))  # an export from before calibration existed
    assert old.calibration is None
    z = _logits(x)
    np.testing.assert_array_equal(old.score_encoded(x), torch.sigmoid(torch.from_numpy(z)).numpy().astype(np.float64))
    cal = Calibration("platt", a=0.5, b=-1.0)
    new = ExportedModel.load(_export(tmp_path / "new", cal.to_dict()))
    expected = 1 / (1 + np.exp(-(0.5 * z.astype(np.float64) - 1.0)))  # Platt by hand on the recorded a, b
    np.testing.assert_allclose(new.score_encoded(x), expected, rtol=1e-12, atol=0)


def test_platt_on_the_logit_is_the_old_sigmoid_then_logit_path_without_its_float32_rounding(tmp_path: Path) -> None:
    """Hand-built logits (the network's last layer set by hand), fraud-like and saturated. The old path took the
    float32 sigmoid s, then Platt on log(s / (1 - s)) with s clipped to [1e-6, 1 - 1e-6]; the new one takes Platt on
    the logit. They agree to 1e-9 wherever the old path's rounding of s to float32 moves its logit by less than
    1e-9 / (|a| p (1 - p)), and to that first-order bound everywhere; saturated rows score exactly alike."""
    a, b = 1.3, -2.1
    folder = _export(tmp_path / "m", Calibration("platt", a=a, b=b).to_dict())
    tensors, meta = load_exported(folder)
    want = np.array([-30.0, -14.0, -6.0, -4.5, -3.0, -2.0, -1.0, 0.0, 0.5, 2.0, 14.0, 30.0], dtype=np.float32)
    tensors = {k: torch.zeros_like(v) for k, v in tensors.items()}
    tensors["0.weight"][0, 0], tensors["0.bias"][0] = 1.0, 100.0  # hidden unit 0 = x0 + 100 > 0: ReLU passes it
    tensors["2.weight"][0, 0], tensors["2.bias"][0] = 1.0, -100.0  # logit = x0, exactly (float32)
    folder = save_exported(tmp_path / "hand", tensors, meta)
    model = ExportedModel.load(folder)
    x = np.zeros((len(want), 3), dtype=np.float32)
    x[:, 0] = want
    served = model.score_encoded(x)
    z = want.astype(np.float64)
    by_hand = 1 / (1 + np.exp(-(a * np.clip(z, np.log(1e-6), np.log((1 - 1e-6) / 1e-6)) + b)))
    np.testing.assert_allclose(served, by_hand, rtol=1e-12, atol=0)
    s32 = torch.sigmoid(torch.from_numpy(want)).numpy().astype(np.float64)  # the old path, step by step
    old = Calibration("platt", a=a, b=b).apply(s32)
    z_old = np.log(np.clip(s32, 1e-6, 1 - 1e-6) / np.clip(1 - s32, 1e-6, 1))
    bound = abs(a) * old * (1 - old) * np.abs(z_old - np.clip(z, np.log(1e-6), np.log((1 - 1e-6) / 1e-6)))
    assert np.all(np.abs(served - old) <= bound * 1.001 + 1e-15)
    fraud_like = (z <= -3) & (z >= -6)  # p ≤ 0.004 there: the old rounding moves p by less than 1e-9
    np.testing.assert_allclose(served[fraud_like], old[fraud_like], rtol=0, atol=1e-9)
    saturated = np.abs(z) >= 14  # clipped alike (the old clip of 1 - s moved its logit by s < 1e-6: p by < 1e-14)
    np.testing.assert_allclose(served[saturated], old[saturated], rtol=0, atol=1e-14)


def test_a_bad_calibration_entry_is_refused_on_load(tmp_path: Path) -> None:
    folder = _export(tmp_path / "m", {"method": "isotonic", "x": [0.5, 0.1], "y": [0.0, 1.0]})
    with pytest.raises(ExportedModelError, match="x non-decreasing"):
        ExportedModel.load(folder)
    folder = _export(tmp_path / "n", {"method": "temperature"})
    with pytest.raises(ExportedModelError, match=r"calibration method 'temperature'"):
        ExportedModel.load(folder)
