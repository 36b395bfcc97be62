"""The reference profile: what the training data looked like, in a JSON document monitoring compares against.

Training builds it from the training set (and the model's scores on it) and logs it as
``reference_profile.json`` on the training run. Monitoring reads it back and bins the current window
with the *same* edges, so PSI against a profile equals PSI against the raw reference frame.

Definitions (monitoring relies on them; ``mlops_monitoring.drift`` documents the statistics):

- **Numeric column**: the reference's quantiles at ``1/n_bins, …, (n_bins-1)/n_bins`` (numpy's default
  ``linear`` interpolation) are the interior bin edges; duplicates are merged, the outer edges are open.
  Value ``v`` falls in bin ``i`` when ``edges[i-1] <= v < edges[i]`` (``-inf``/``+inf`` beyond the ends).
  Missing values (NaN) are counted apart under ``missing``.
- **Categorical column**: the count of each category (as a string); missing values under ``missing``.
  With more than ``max_categories`` categories the rarest are merged into ``other_count``.
- **Score**: the model's scores on the reference, profiled like a numeric column.
- ``ecdf``: 1001 reference quantiles (0, 0.001, …, 1) so a KS statistic can be approximated from the
  profile alone (within about 0.001 of the exact one).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from mlops_core.errors import PlatformError

if TYPE_CHECKING:
    import pandas as pd

PROFILE_VERSION = 1
ECDF_POINTS = 1001
_SUMMARY_QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)


class ProfileError(PlatformError):
    """A reference profile cannot be built or read (missing column, empty data, wrong format)."""


def sorted_finite(values: Any, *, name: str) -> tuple[np.ndarray, int]:
    """Return the non-missing values of a numeric column, sorted, and how many were missing.

    Raises:
        ProfileError: the column is not numeric or holds an infinite value.
    """
    import pandas as pd  # here, not at the top: the LM workers reach this module (binning) but never a DataFrame

    series = values if isinstance(values, pd.Series) else pd.Series(values)
    if not (pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)):
        raise ProfileError(f"column {name!r} has dtype {series.dtype!s}; expected a numeric column (int or float)")
    arr = series.to_numpy(dtype=np.float64, na_value=np.nan, copy=True)  # a copy: sorted in place below
    arr.sort()  # in place; numpy sorts NaN last, so the missing values are the tail
    n_valid = int(np.searchsorted(arr, np.nan, side="left"))
    arr = arr[:n_valid]
    if n_valid and (np.isinf(arr[0]) or np.isinf(arr[-1])):
        raise ProfileError(f"column {name!r} holds an infinite value; expected finite numbers or NaN for missing")
    return arr, len(series) - n_valid


def quantile_positions(n: int, probs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For ``n`` sorted values: the 0-based ranks ``lo``, ``hi`` around each quantile and the fraction between.

    An engine that sorts elsewhere (DuckDB) fetches the order statistics at ``lo`` and ``hi`` and calls
    :func:`lerp_quantiles`, so its quantiles equal :func:`quantiles_of_sorted` bit for bit.
    """
    pos = np.asarray(probs, dtype=np.float64) * (n - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    return lo, hi, pos - lo


def lerp_quantiles(low: np.ndarray, high: np.ndarray, frac: np.ndarray) -> np.ndarray:
    """np.quantile's lerp: exact at both ends, so equal neighbours give exactly that value."""
    return np.where(frac >= 0.5, high - (high - low) * (1 - frac), low + (high - low) * frac)


def quantiles_of_sorted(sorted_values: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Quantiles of a sorted array, equal to ``np.quantile(..., method="linear")`` without sorting again."""
    lo, hi, frac = quantile_positions(sorted_values.shape[0], probs)
    return lerp_quantiles(sorted_values[lo], sorted_values[hi], frac)


def quantile_edges(sorted_values: np.ndarray, n_bins: int) -> np.ndarray:
    """Interior bin edges: the reference quantiles at ``k / n_bins`` for ``k = 1 … n_bins-1``, duplicates merged."""
    if n_bins < 2:
        raise ProfileError(f"n_bins={n_bins!r}; expected at least 2")
    if sorted_values.shape[0] == 0:
        return np.empty(0, dtype=np.float64)
    return np.unique(quantiles_of_sorted(sorted_values, edge_probs(n_bins)))


def edge_probs(n_bins: int) -> np.ndarray:
    """The probabilities ``k / n_bins`` (``k = 1 … n_bins-1``) whose quantiles are the interior bin edges."""
    return np.arange(1, n_bins, dtype=np.float64) / n_bins


def bin_counts(sorted_values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Counts per bin (``len(edges) + 1`` of them) of sorted values; bin ``i`` is ``[edges[i-1], edges[i])``."""
    below = np.searchsorted(sorted_values, edges, side="left")
    cumulative = np.concatenate(([0], below, [sorted_values.shape[0]]))
    return np.diff(cumulative).astype(np.int64)


def category_counts(values: Any, *, name: str) -> tuple[dict[str, int], int]:
    """Counts per category (keys as strings) and the number of missing values."""
    import pandas as pd

    series = values if isinstance(values, pd.Series) else pd.Series(values)
    missing = series.isna()
    n_missing = int(missing.sum())
    present = series[~missing] if n_missing else series
    counts = present.astype(str).value_counts(sort=False)
    return {str(k): int(v) for k, v in counts.items()}, n_missing


def profile_numeric(values: Any, *, name: str, n_bins: int) -> dict[str, Any]:
    """Profile of one numeric column (see the module docstring)."""
    sorted_values, n_missing = sorted_finite(values, name=name)
    n = int(sorted_values.shape[0])
    if n == 0:
        raise ProfileError(f"column {name!r} has no non-missing value; a reference needs data to compare against")
    edges = quantile_edges(sorted_values, n_bins)
    summary = quantiles_of_sorted(sorted_values, np.asarray(_SUMMARY_QUANTILES))
    ecdf = quantiles_of_sorted(sorted_values, np.linspace(0.0, 1.0, ECDF_POINTS))
    return {
        "count": n,
        "missing": n_missing,
        "edges": edges.tolist(),
        "counts": bin_counts(sorted_values, edges).tolist(),
        "mean": float(sorted_values.mean()),
        "std": float(sorted_values.std(ddof=1)) if n > 1 else 0.0,
        "min": float(sorted_values[0]),
        "max": float(sorted_values[-1]),
        "quantiles": {f"p{round(q * 100):02d}": float(v) for q, v in zip(_SUMMARY_QUANTILES, summary, strict=True)},
        "ecdf": ecdf.tolist(),
    }


def profile_categorical(values: Any, *, name: str, max_categories: int) -> dict[str, Any]:
    """Profile of one categorical column (see the module docstring)."""
    counts, n_missing = category_counts(values, name=name)
    n = sum(counts.values())
    if n == 0:
        raise ProfileError(f"column {name!r} has no non-missing value; a reference needs data to compare against")
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    kept, rest = ranked[:max_categories], ranked[max_categories:]
    return {
        "count": n,
        "missing": n_missing,
        "n_unique": len(counts),
        "counts": dict(kept),
        "other_count": sum(v for _, v in rest),
    }


def build_reference_profile(
    df: pd.DataFrame,
    numeric: Sequence[str],
    categorical: Sequence[str],
    n_bins: int = 10,
    *,
    scores: Any = None,
    labels: Any = None,
    metrics: Mapping[str, float] | None = None,
    max_categories: int = 200,
) -> dict[str, Any]:
    """Profile the reference (training) data as a JSON-serialisable dict.

    Args:
        df: The reference rows.
        numeric: Numeric columns to profile (quantile bins, summary statistics, ECDF sketch).
        categorical: Categorical columns to profile (category counts).
        n_bins: Quantile bins per numeric column (PSI's bins).
        scores: The model's scores on ``df`` (array-like or the name of a column of ``df``); profiled as ``score``.
        labels: The 0/1 labels of ``df`` (array-like or a column name); their mean is ``metrics.positive_rate``.
        metrics: What validation measured (e.g. ``{"f1": 0.94}``); monitoring compares realized quality to it.
        max_categories: Categories kept per categorical column; rarer ones are merged into ``other_count``.

    Returns:
        ``{"version", "n_rows", "n_bins", "numeric": {col: …}, "categorical": {col: …}, "score": … | None,
        "metrics": {…}}``.

    Raises:
        ProfileError: a column is missing, listed twice, of the wrong type, or empty.
    """
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise ProfileError(f"df is a {type(df).__name__}; expected a pandas DataFrame")
    if len(df) == 0:
        raise ProfileError("the reference DataFrame has no rows; a profile needs data")
    numeric, categorical = list(numeric), list(categorical)
    both = sorted(set(numeric) & set(categorical))
    if both:
        raise ProfileError(f"columns {both!r} are listed as numeric and as categorical; list each once")
    missing = [c for c in numeric + categorical if c not in df.columns]
    if missing:
        have = sorted(map(str, df.columns))
        raise ProfileError(f"columns {missing!r} are not in the reference DataFrame; it has {have!r}")
    if max_categories < 1:
        raise ProfileError(f"max_categories={max_categories!r}; expected at least 1")
    score_profile = None
    if scores is not None:
        if isinstance(scores, str):
            if scores not in df.columns:
                raise ProfileError(f"score column {scores!r} is not in the reference DataFrame")
            scores = df[scores]
        score_arr = np.asarray(scores, dtype=np.float64)
        if score_arr.shape != (len(df),):
            raise ProfileError(f"scores have shape {score_arr.shape}; expected one score per row ({len(df)},)")
        score_profile = profile_numeric(score_arr, name="score", n_bins=n_bins)
    summary = {str(k): float(v) for k, v in (metrics or {}).items()}
    if labels is not None:
        label_arr = np.asarray(df[labels] if isinstance(labels, str) else labels, dtype=np.float64)
        if label_arr.shape != (len(df),) or not np.isin(label_arr, (0.0, 1.0)).all():
            raise ProfileError(f"labels must be one 0/1 value per row ({len(df)},); got shape {label_arr.shape}")
        summary["positive_rate"] = float(label_arr.mean())
    return {
        "version": PROFILE_VERSION,
        "n_rows": len(df),
        "n_bins": n_bins,
        "numeric": {c: profile_numeric(df[c], name=c, n_bins=n_bins) for c in numeric},
        "categorical": {c: profile_categorical(df[c], name=c, max_categories=max_categories) for c in categorical},
        "score": score_profile,
        "metrics": summary,
    }


def check_profile(profile: Any) -> dict[str, Any]:
    """Check that a loaded document is a reference profile this code understands; return it.

    Raises:
        ProfileError: not a dict, wrong version, or a column's bins and counts disagree.
    """
    if not isinstance(profile, dict) or "numeric" not in profile or "categorical" not in profile:
        raise ProfileError("not a reference profile: expected a JSON object with 'numeric' and 'categorical' keys")
    if profile.get("version") != PROFILE_VERSION:
        raise ProfileError(f"reference profile version {profile.get('version')!r}; expected {PROFILE_VERSION}")
    columns = dict(profile["numeric"])
    if profile.get("score") is not None:
        columns["score"] = profile["score"]
    for name, col in columns.items():
        if len(col["counts"]) != len(col["edges"]) + 1 or not all(math.isfinite(e) for e in col["edges"]):
            raise ProfileError(
                f"reference profile column {name!r}: expected finite edges and len(counts) == len(edges) + 1"
            )
    return profile
