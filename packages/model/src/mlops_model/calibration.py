"""Score calibration fitted at training time on a held-out split, recorded in ``model.json``, applied on scoring.

Performance estimation without labels (CBPE, ``mlops_monitoring.estimation``) reads a score as the probability
of fraud, which a network trained with a positive-class weight does not give. A calibration map fixes that:

- ``isotonic``: scikit-learn's :class:`~sklearn.isotonic.IsotonicRegression` (``out_of_bounds="clip"``); its
  breakpoints are recorded and applied by linear interpolation, which is what its ``predict`` does;
- ``platt``: a logistic regression on the score's logit, ``sigmoid(a * logit(s) + b)``.

``model.json`` gains ``calibration: {"method", ...parameters, "holdout_rows", "ece_before", "ece_after"}``.
An export without it scores as before (the raw sigmoid): old exports still load.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlops_model.errors import ExportedModelError

METHODS = ("isotonic", "platt")
_EPS = 1e-6


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
