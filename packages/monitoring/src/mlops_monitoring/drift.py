"""Drift of a current window against the training reference: one verdict per column, one level for the window.

``compare(reference, current)`` takes the reference as a DataFrame (exact KS and chi² on the raw rows) or
as a reference profile from :func:`mlops_core.profile.build_reference_profile` (what training logs; PSI
and chi² are exact, KS comes from the profile's ECDF sketch, within ~0.001). Per column:

- numeric: ``method="ks"`` (``"ks_sketch"`` against a profile), ``statistic`` = KS D, ``effect_size`` = D;
- categorical: ``method="chi2"``, ``statistic`` = chi², ``effect_size`` = Cramér's V;
- ``psi`` for both, binned as below; ``score`` (the prediction) is a numeric column and always a key column.

Bins for PSI: numeric columns use the reference's quantiles (``n_bins``) with open outer edges
(:mod:`mlops_core.profile`); categorical columns use the reference's categories plus an "other" bucket for
current values the reference never saw. Missing values get a bucket of their own on both kinds when either
side has any, so a jump in the missing rate is drift too; KS runs on the non-missing values.

Verdicts: at large n every p-value is tiny, so ``drifted`` and the level come from PSI (effect size);
p-values are reported beside them. See :mod:`mlops_monitoring.policy` for the levels.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mlops_config import MonitoringConfig
from mlops_core import ProfileError, bin_counts, check_profile, quantile_edges, sorted_finite
from mlops_model import statistics
from mlops_monitoring.errors import MonitoringError
from mlops_monitoring.policy import Level, column_severity, drift_level

log = logging.getLogger(__name__)

SCORE = "score"
OTHER = "__other__"
MISSING = "__missing__"


@dataclass(frozen=True)
class ColumnDrift:
    """The verdict on one column."""

    method: str
    statistic: float
    p_value: float | None
    psi: float
    effect_size: float
    drifted: bool
    severity: str
    kind: str
    n_reference: int
    n_current: int
    missing_reference: int = 0
    missing_current: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; ``method, statistic, p_value, psi, drifted`` first, details after."""
        return asdict(self)


@dataclass(frozen=True)
class DriftReport:
    """Per-column verdicts and the window's drift level (``OK``, ``INFO``, ``WARNING``, ``CRITICAL``)."""

    columns: dict[str, ColumnDrift]
    level: str
    reasons: list[str]
    n_reference: int
    n_current: int
    window: dict[str, Any] = field(default_factory=dict)

    def drifted(self) -> list[str]:
        """Names of the columns whose PSI crossed the warning threshold."""
        return [name for name, col in self.columns.items() if col.drifted]

    def to_dict(self) -> dict[str, Any]:
        """``{"columns": {name: {"method", "statistic", "p_value", "psi", "drifted", …}}, "level", …}``."""
        return {
            "columns": {name: col.to_dict() for name, col in self.columns.items()},
            "level": self.level,
            "reasons": list(self.reasons),
            "n_reference": self.n_reference,
            "n_current": self.n_current,
            "window": dict(self.window),
        }


def _numeric_sorted(frame: pd.DataFrame, name: str, side: str) -> tuple[np.ndarray, int]:
    try:
        return sorted_finite(frame[name], name=name)
    except ProfileError as exc:
        raise MonitoringError(f"{side} data: {exc}") from None


def with_missing(counts: np.ndarray, ref_missing: int, cur_missing: int, own: int) -> np.ndarray:
    return np.append(counts, own) if (ref_missing or cur_missing) else counts


def column_verdict(
    kind: str, method: str, stat: float, p: float | None, psi: float, effect: float, key: bool,
    monitoring: MonitoringConfig, n: tuple[int, int], missing: tuple[int, int],
) -> ColumnDrift:
    """The verdict on one column from its statistics; ``drifted`` and the severity come from PSI."""
    severity = column_severity(psi, key=key, monitoring=monitoring)
    return ColumnDrift(
        method=method, statistic=stat, p_value=p, psi=psi, effect_size=effect,
        drifted=psi >= monitoring.psi_warning, severity=severity.value, kind=kind,
        n_reference=n[0], n_current=n[1], missing_reference=missing[0], missing_current=missing[1],
    )


def _numeric_vs_frame(ref: pd.DataFrame, cur: pd.DataFrame, name: str, kind: str, key: bool,
                      monitoring: MonitoringConfig) -> ColumnDrift:
    ref_sorted, ref_missing = _numeric_sorted(ref, name, "reference")
    cur_sorted, cur_missing = _numeric_sorted(cur, name, "current")
    if ref_sorted.size == 0 or cur_sorted.size == 0:
        side = "reference" if ref_sorted.size == 0 else "current"
        raise MonitoringError(f"column {name!r} has no non-missing value in the {side} data; nothing to compare")
    edges = quantile_edges(ref_sorted, monitoring.n_bins)
    ref_counts = with_missing(bin_counts(ref_sorted, edges), ref_missing, cur_missing, ref_missing)
    cur_counts = with_missing(bin_counts(cur_sorted, edges), ref_missing, cur_missing, cur_missing)
    d, p = statistics.ks_sorted(ref_sorted, cur_sorted)  # both sorted already: neither is sorted again
    value = statistics.psi(ref_counts, cur_counts, monitoring.psi_floor)
    return column_verdict(kind, "ks", d, p, value, d, key, monitoring, (ref_sorted.size, cur_sorted.size),
                    (ref_missing, cur_missing))


def _numeric_vs_profile(col: Mapping[str, Any], cur: pd.DataFrame, name: str, kind: str, key: bool,
                        monitoring: MonitoringConfig) -> ColumnDrift:
    cur_sorted, cur_missing = _numeric_sorted(cur, name, "current")
    if cur_sorted.size == 0:
        raise MonitoringError(f"column {name!r} has no non-missing value in the current data; nothing to compare")
    ref_missing = int(col["missing"])
    edges = np.asarray(col["edges"], dtype=np.float64)
    ref_counts = with_missing(np.asarray(col["counts"]), ref_missing, cur_missing, ref_missing)
    cur_counts = with_missing(bin_counts(cur_sorted, edges), ref_missing, cur_missing, cur_missing)
    d, p = statistics.ks_from_sketch(np.asarray(col["ecdf"], dtype=np.float64), int(col["count"]), cur_sorted)
    value = statistics.psi(ref_counts, cur_counts, monitoring.psi_floor)
    return column_verdict(kind, "ks_sketch", d, p, value, d, key, monitoring, (int(col["count"]), cur_sorted.size),
                    (ref_missing, cur_missing))


def _category_counts(frame: pd.DataFrame, name: str) -> tuple[pd.Series, int]:
    """Counts per category (keys as strings) and the number of missing values, in one hashing pass."""
    counts = frame[name].value_counts(dropna=False, sort=False)
    missing_keys = counts.index.isna()
    missing = int(counts[missing_keys].sum()) if missing_keys.any() else 0
    counts = counts[~missing_keys] if missing_keys.any() else counts
    counts.index = counts.index.astype(str)
    if not counts.index.is_unique:  # e.g. 1 and "1" in an object column: one category once written out
        counts = counts.groupby(level=0, sort=False).sum()
    return counts[counts > 0], missing


def categorical_verdict(ref_counts: pd.Series, ref_missing: int, ref_other: int, cur_counts: pd.Series,
                        cur_missing: int, key: bool, monitoring: MonitoringConfig, n_ref: int) -> ColumnDrift:
    """The verdict on a categorical column from its counts per category (string keys) and missing counts."""
    ref_counts = ref_counts[ref_counts > 0]
    known = cur_counts.reindex(ref_counts.index, fill_value=0)
    unseen = int(cur_counts.sum() - known.sum())
    miss_ref, miss_cur = ([ref_missing], [cur_missing]) if (ref_missing or cur_missing) else ([], [])
    # PSI: the reference's categories + "other" (+ missing)
    psi_ref = np.concatenate([ref_counts.to_numpy(), [ref_other], miss_ref])
    psi_cur = np.concatenate([known.to_numpy(), [unseen], miss_cur])
    if ref_other:  # a profile merged rare reference categories: chi² over the PSI buckets
        stat, p, v = statistics.chi2(psi_ref, psi_cur)
    else:  # chi²: every category seen on either side (+ missing)
        union = ref_counts.index.union(cur_counts.index)
        stat, p, v = statistics.chi2(
            np.concatenate([ref_counts.reindex(union, fill_value=0).to_numpy(), miss_ref]),
            np.concatenate([cur_counts.reindex(union, fill_value=0).to_numpy(), miss_cur]),
        )
    value = statistics.psi(psi_ref, psi_cur, monitoring.psi_floor)
    return column_verdict("categorical", "chi2", stat, p, value, v, key, monitoring,
                    (n_ref, int(cur_counts.sum())), (ref_missing, cur_missing))


def _infer_columns(reference: pd.DataFrame) -> tuple[list[str], list[str]]:
    numeric, categorical = [], []
    for name, dtype in reference.dtypes.items():
        if pd.api.types.is_bool_dtype(dtype) or isinstance(dtype, pd.CategoricalDtype) or \
                pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype):
            categorical.append(str(name))
        elif pd.api.types.is_numeric_dtype(dtype):
            numeric.append(str(name))
        else:
            raise MonitoringError(
                f"cannot infer how to compare column {name!r} of dtype {dtype!s}; pass numeric= and categorical= "
                "explicitly (datetime and id columns are not features)"
            )
    return numeric, categorical


def checked_columns(numeric: Sequence[str] | None, categorical: Sequence[str] | None, has_score: bool,
                    have_ref: Iterable[str], have_current: Iterable[str]) -> tuple[list[str], list[str]]:
    """The columns to compare (every engine's one check): at least one, none listed twice, all on both sides."""
    numeric, categorical = list(numeric or ()), list(categorical or ())
    if not numeric and not categorical and not has_score:
        raise MonitoringError("no column to compare: pass numeric= and/or categorical= (or a score column)")
    both = sorted(set(numeric) & set(categorical))
    if both:
        raise MonitoringError(f"columns {both!r} are listed as numeric and as categorical; list each once")
    for side, names in (("the reference", have_ref), ("the current data", have_current)):
        have = sorted(map(str, names))
        missing = [c for c in [*numeric, *categorical] if c not in have]
        if missing:
            raise MonitoringError(f"columns {missing!r} are not in {side}; it has {have!r}")
    return numeric, categorical


def profile_columns(
    reference: Mapping[str, Any], numeric: Sequence[str] | None, categorical: Sequence[str] | None,
    score: str | None, current_columns: Iterable[str],
) -> tuple[dict[str, Any], Sequence[str] | None, Sequence[str] | None, list[str], bool, int]:
    """A reference profile checked, and what a comparison against it uses (every engine's one reading):
    ``(profile, numeric, categorical, reference columns, whether scores are compared, reference rows)``.
    With neither ``numeric`` nor ``categorical`` given, the profile's own columns."""
    try:
        profile = check_profile(dict(reference))
    except ProfileError as exc:
        raise MonitoringError(str(exc)) from None
    if numeric is None and categorical is None:
        numeric, categorical = list(profile["numeric"]), list(profile["categorical"])
    ref_cols = [*profile["numeric"], *profile["categorical"]]
    has_score = score is not None and profile.get("score") is not None and score in set(current_columns)
    return profile, numeric, categorical, ref_cols, has_score, int(profile["n_rows"])


def compare(
    reference: pd.DataFrame | Mapping[str, Any],
    current: pd.DataFrame,
    monitoring: MonitoringConfig | None = None,
    *,
    numeric: Sequence[str] | None = None,
    categorical: Sequence[str] | None = None,
    score: str | None = SCORE,
    window: Mapping[str, Any] | None = None,
) -> DriftReport:
    """Compare the current window with the reference, column by column.

    Args:
        reference: The reference rows, or a reference profile (``mlops_core.profile``).
        current: The current rows.
        monitoring: Thresholds, bins and key features; defaults to ``MonitoringConfig()``.
        numeric: Numeric feature columns. With ``categorical`` also ``None``: the profile's columns, or for a
            DataFrame inferred from dtypes (numbers numeric; strings, categories and booleans categorical).
        categorical: Categorical feature columns.
        score: The prediction-score column; compared (as a key column) when both sides have it.
        window: What the current rows cover (e.g. ``{"since": …, "until": …}``), copied into the report.

    Returns:
        The per-column verdicts and the window's level.

    Raises:
        MonitoringError: a column is missing on either side, has the wrong type, or a frame is empty.
    """
    monitoring = monitoring or MonitoringConfig()
    if not isinstance(current, pd.DataFrame):
        raise MonitoringError(f"current is a {type(current).__name__}; expected a pandas DataFrame")
    if len(current) == 0:
        raise MonitoringError("the current window has no rows; nothing to compare")
    is_frame = isinstance(reference, pd.DataFrame)
    if is_frame:
        assert isinstance(reference, pd.DataFrame)
        if len(reference) == 0:
            raise MonitoringError("the reference DataFrame has no rows; nothing to compare against")
        ref_cols = [str(c) for c in reference.columns]
        if numeric is None and categorical is None:
            numeric, categorical = _infer_columns(reference.drop(columns=[score] if score in ref_cols else []))
        has_score = score is not None and score in ref_cols and score in current.columns
        n_ref = len(reference)
    else:
        profile, numeric, categorical, ref_cols, has_score, n_ref = profile_columns(
            reference, numeric, categorical, score, current.columns)
    if score is not None and not has_score and score in current.columns:
        log.warning("current data has %r but the reference has no scores; prediction drift is not compared", score)
    numeric, categorical = checked_columns(numeric, categorical, has_score, ref_cols, current.columns)
    keys = set(monitoring.key_features)
    columns: dict[str, ColumnDrift] = {}
    for name in numeric:
        if is_frame:
            columns[name] = _numeric_vs_frame(reference, current, name, "numeric", name in keys, monitoring)
        else:
            columns[name] = _numeric_vs_profile(profile["numeric"][name], current, name, "numeric", name in keys,
                                                monitoring)
    for name in categorical:
        if is_frame:
            counts, missing = _category_counts(reference, name)
            columns[name] = categorical_verdict(counts, missing, 0, *_category_counts(current, name), name in keys,
                                                monitoring, int(counts.sum()))
        else:
            col = profile["categorical"][name]
            counts = pd.Series(col["counts"], dtype=np.int64)
            columns[name] = categorical_verdict(counts, int(col["missing"]), int(col["other_count"]),
                                                *_category_counts(current, name), name in keys, monitoring,
                                                int(col["count"]) + int(col["other_count"]))
    if has_score:
        assert score is not None
        if is_frame:
            columns[score] = _numeric_vs_frame(reference, current, score, "score", True, monitoring)
        else:
            columns[score] = _numeric_vs_profile(profile["score"], current, score, "score", True, monitoring)
    level, reasons = drift_level(columns, monitoring)
    log.info("drift: %s over %d columns (%s)", level.value, len(columns), "; ".join(reasons) or "no drift")
    return DriftReport(columns=columns, level=level.value, reasons=reasons, n_reference=n_ref,
                       n_current=len(current), window=dict(window or {}))


__all__ = ["MISSING", "OTHER", "SCORE", "ColumnDrift", "DriftReport", "Level", "compare"]
