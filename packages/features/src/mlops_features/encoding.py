"""The one encoding from a training-set or request row to the model's float32 input, shared by training and serving.

The encoder is a plain JSON-serialisable dict (it travels inside the exported model's ``model.json``):

- ``numeric``: ordered list of ``{"name", "log", "mean", "std"}``; ``log`` columns go through
  ``sign(x) * log1p(|x|)`` before standardisation; a missing value encodes as the mean (0 after scaling).
- ``derived``: ordered list of ``{"name", "op", "args", "mean", "std"}`` computed from other columns first;
  ``log_ratio`` is ``log((a + 1) / (b + 1))`` (e.g. the amount against the user's usual amount).
- ``categorical``: ordered list of ``{"name", "vocab"}``; one-hot over the vocabulary plus one slot for
  anything else (new or missing values).
- ``input_dim``: width of the encoded row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from mlops_features.aggregates import MERCHANT_FEATURES, USER_FEATURES
from mlops_features.errors import DataError

ENCODER_VERSION = 1
DEFAULT_NUMERIC = ("amount", *USER_FEATURES, *MERCHANT_FEATURES)
DEFAULT_CATEGORICAL = ("currency", "category", "country", "device", "channel")
DEFAULT_DERIVED = ({"name": "amount_vs_user_mean_7d", "op": "log_ratio", "args": ["amount", "user_amount_mean_7d"]},)
_LOG_PREFIXES = ("amount", "user_amount_sum", "user_amount_mean", "user_amount_std", "merchant_amount")
_OPS = {"log_ratio": lambda a, b: np.log((np.abs(a) + 1.0) / (np.abs(b) + 1.0))}


def fit_encoder(
    df: pd.DataFrame,
    numeric: Sequence[str] | None = None,
    categorical: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Fit means, standard deviations and vocabularies on ``df`` (the training split only).

    Args:
        df: Training rows: request-time fields and feature columns.
        numeric: Numeric columns; default: ``amount`` and every FeatureService column present in ``df``.
        categorical: Categorical columns; default: the request-time categoricals present in ``df``.

    Returns:
        The encoder spec (see module doc).
    """
    if len(df) == 0:
        raise DataError("cannot fit an encoder on an empty DataFrame: expected training rows")
    numeric = list(numeric) if numeric is not None else [c for c in DEFAULT_NUMERIC if c in df.columns]
    categorical = list(categorical) if categorical is not None else [c for c in DEFAULT_CATEGORICAL if c in df.columns]
    missing = [c for c in (*numeric, *categorical) if c not in df.columns]
    if missing:
        raise DataError(f"columns {missing!r} are not in the DataFrame; it has {sorted(df.columns)!r}")
    spec_numeric = []
    for name in numeric:
        log = name.startswith(_LOG_PREFIXES)
        values = _numeric(df, name, log)
        spec_numeric.append({"name": name, "log": log, **_moments(values)})
    spec_derived = []
    for d in DEFAULT_DERIVED:
        if all(a in numeric for a in d["args"]):
            values = _derive(df, d)
            spec_derived.append({**d, **_moments(values)})
    spec_categorical = [
        {"name": name, "vocab": sorted(df[name].dropna().astype(str).unique().tolist())} for name in categorical
    ]
    dim = len(spec_numeric) + len(spec_derived) + sum(len(c["vocab"]) + 1 for c in spec_categorical)
    return {
        "version": ENCODER_VERSION,
        "numeric": spec_numeric,
        "derived": spec_derived,
        "categorical": spec_categorical,
        "input_dim": dim,
    }


def encode(df: pd.DataFrame, encoder: dict[str, Any]) -> np.ndarray:
    """Encode rows with a fitted encoder; returns a ``float32`` array of shape ``(len(df), input_dim)``."""
    if encoder.get("version") != ENCODER_VERSION:
        raise DataError(f"encoder version {encoder.get('version')!r} is not supported: expected {ENCODER_VERSION}")
    needed = [n["name"] for n in encoder["numeric"]] + [c["name"] for c in encoder["categorical"]]
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise DataError(f"cannot encode: columns {missing!r} are missing; the encoder expects {needed!r}")
    n = len(df)
    out = np.zeros((n, encoder["input_dim"]), dtype=np.float32)
    col = 0
    for spec in encoder["numeric"]:
        values = _numeric(df, spec["name"], spec["log"])
        out[:, col] = _scale(values, spec)
        col += 1
    for spec in encoder["derived"]:
        out[:, col] = _scale(_derive(df, spec), spec)
        col += 1
    for spec in encoder["categorical"]:
        index = {v: i for i, v in enumerate(spec["vocab"])}
        values = df[spec["name"]].astype(object).where(df[spec["name"]].notna(), None)
        slots = np.fromiter((index.get(str(v), len(index)) if v is not None else len(index) for v in values),
                            dtype=np.int64, count=n)
        out[np.arange(n), col + slots] = 1.0
        col += len(index) + 1
    assert col == encoder["input_dim"], "encoder spec is inconsistent with its input_dim"
    return out


def _numeric(df: pd.DataFrame, name: str, log: bool) -> np.ndarray:
    try:
        values = pd.to_numeric(df[name], errors="raise").to_numpy(dtype=np.float64, na_value=np.nan)
    except (ValueError, TypeError) as exc:
        raise DataError(f"column {name!r} must be numeric for the encoder: {exc}") from None
    return np.sign(values) * np.log1p(np.abs(values)) if log else values


def _derive(df: pd.DataFrame, spec: dict[str, Any]) -> np.ndarray:
    args = [pd.to_numeric(df[a], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan) for a in spec["args"]]
    return _OPS[spec["op"]](*args)


def _moments(values: np.ndarray) -> dict[str, float]:
    finite = values[np.isfinite(values)]
    mean = float(finite.mean()) if finite.size else 0.0
    std = float(finite.std()) if finite.size else 1.0
    return {"mean": mean, "std": std if std > 1e-12 else 1.0}


def _scale(values: np.ndarray, spec: dict[str, Any]) -> np.ndarray:
    scaled = (values - spec["mean"]) / spec["std"]
    return np.where(np.isfinite(scaled), scaled, 0.0)
