"""Score calibration fitted at training time on a held-out split, recorded in ``model.json``, applied on scoring.

Performance estimation without labels (CBPE, ``mlops_monitoring.estimation``) reads a score as the probability
of fraud, which a network trained with a positive-class weight does not give. A calibration map fixes that:

- ``isotonic``: scikit-learn's :class:`~sklearn.isotonic.IsotonicRegression` (``out_of_bounds="clip"``); its
  breakpoints are recorded and applied by linear interpolation, which is what its ``predict`` does;
- ``platt``: a logistic regression on the score's logit, ``sigmoid(a * logit(s) + b)``.

``model.json`` gains ``calibration: {"method", ...parameters, "holdout_rows", "ece_before", "ece_after"}``.
An export without it scores as before (the raw sigmoid): old exports still load.

Every reader turns the network's logits into served scores through :func:`served_scores`: Platt is applied to
the logit itself in one expression (not the sigmoid, then its logit again, then Platt: ~10 µs of separate NumPy
calls on a one-row request).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlops_model.errors import ExportedModelError

METHODS = ("isotonic", "platt")
_EPS = 1e-6
LOGIT_RANGE = (float(np.log(_EPS)), float(np.log((1 - _EPS) / _EPS)))
"""Platt's logit is clipped to this range: what :meth:`Calibration.apply`'s clipping of a score to
[1e-6, 1 − 1e-6] before taking its logit amounts to, so saturated rows score as they always did."""


@dataclass(frozen=True)
class Calibration:
    """A fitted monotone map from raw scores to calibrated probabilities."""

    method: str
    x: tuple[float, ...] = ()
    y: tuple[float, ...] = ()
    a: float = 1.0
    b: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    def apply(self, scores: Any) -> np.ndarray:
        """Calibrated probabilities of raw ``scores`` (float64)."""
        s = np.asarray(scores, dtype=np.float64)
        if self.method == "isotonic":
            return np.interp(s, np.asarray(self.x), np.asarray(self.y))
        z = np.log(np.clip(s, _EPS, 1 - _EPS) / np.clip(1 - s, _EPS, 1))
        return 1 / (1 + np.exp(-(self.a * z + self.b)))

    def to_dict(self) -> dict[str, Any]:
        """The ``calibration`` entry of ``model.json``."""
        params: dict[str, Any] = ({"x": list(self.x), "y": list(self.y)} if self.method == "isotonic"
                                  else {"a": self.a, "b": self.b})
        return {"method": self.method, **params, **self.info}

    @classmethod
    def from_dict(cls, raw: Any, *, source: str) -> Calibration:
        """Parse ``model.json``'s ``calibration``; a bad entry is an :class:`ExportedModelError` naming ``source``."""
        if not isinstance(raw, dict) or raw.get("method") not in METHODS:
            method = raw.get("method") if isinstance(raw, dict) else raw
            raise ExportedModelError(f"{source}: calibration method {method!r}; expected one of {METHODS!r}")
        info = {k: v for k, v in raw.items() if k not in ("method", "x", "y", "a", "b")}
        try:
            if raw["method"] == "isotonic":
                x, y = tuple(float(v) for v in raw["x"]), tuple(float(v) for v in raw["y"])
                if len(x) != len(y) or not x or any(b < a for a, b in itertools.pairwise(x)):
                    raise ValueError("x and y must be non-empty, of one length, x non-decreasing")
                return cls("isotonic", x=x, y=y, info=info)
            return cls("platt", a=float(raw["a"]), b=float(raw["b"]), info=info)
        except (KeyError, TypeError, ValueError) as exc:
            raise ExportedModelError(f"{source}: unusable {raw['method']} calibration: {exc}") from None


def fit_calibration(scores: Any, labels: Any, method: str) -> Calibration:
    """Fit ``method`` (``isotonic`` or ``platt``) on held-out raw ``scores`` and their 0/1 ``labels``.

    Raises:
        ExportedModelError: an unknown method, or labels of one class only (nothing to calibrate against).
    """
    if method not in METHODS:
        raise ExportedModelError(f"calibration method {method!r}; expected one of {METHODS!r}")
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels, dtype=np.float64).ravel()
    if len(s) != len(y) or not 0 < y.sum() < len(y):
        raise ExportedModelError(f"calibration needs held-out scores and labels of both classes; got {len(s)} "
                                 f"scores, {len(y)} labels, {int(y.sum())} positive")
    if method == "isotonic":
        from sklearn.isotonic import IsotonicRegression

        iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(s, y)
        return Calibration("isotonic", x=tuple(map(float, iso.X_thresholds_)), y=tuple(map(float, iso.y_thresholds_)))
    from sklearn.linear_model import LogisticRegression

    z = np.log(np.clip(s, _EPS, 1 - _EPS) / np.clip(1 - s, _EPS, 1)).reshape(-1, 1)
    lr = LogisticRegression(C=1e6).fit(z, y)  # effectively unpenalized: Platt's fit
    return Calibration("platt", a=float(lr.coef_[0, 0]), b=float(lr.intercept_[0]))


@functools.cache
def _expit() -> Any:
    """scipy's logistic ufunc: one call for ``1 / (1 + exp(-t))`` (three NumPy calls on a one-row request);
    imported on first use, since ``scipy.special`` takes ~0.5 s to import."""
    from scipy.special import expit

    return expit


def served_scores(logits: Any, calibration: Calibration | None) -> np.ndarray:
    """The probability of fraud served for each raw ``logits`` value (the network's float32 output), float64.

    Platt: ``sigmoid(a · logit + b)`` computed in one step in float64 on the logit (clipped to :data:`LOGIT_RANGE`).
    The old path took the float32 sigmoid, its logit again and then Platt: the same function, but it carried the
    float32 rounding of the sigmoid (~1e-8 in the probability, ~1e-7 where the raw score nears 1) and twice the
    NumPy calls per request (``benchmarks/platt_fold.py``).
    Without a calibrator, or with ``isotonic``, the float32 sigmoid as before (then isotonic's interpolation).
    """
    z = np.asarray(logits, dtype=np.float32).reshape(-1)
    if calibration is not None and calibration.method == "platt":
        clipped = np.minimum(np.maximum(z.astype(np.float64), LOGIT_RANGE[0]), LOGIT_RANGE[1])
        return _expit()(calibration.a * clipped + calibration.b)
    import torch

    scores = torch.sigmoid(torch.from_numpy(z)).numpy().astype(np.float64)
    return scores if calibration is None else calibration.apply(scores)
