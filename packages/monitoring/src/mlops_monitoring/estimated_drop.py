"""The estimated performance drop as a rollback signal: CBPE on the window against CBPE on the reference.

Drift says the inputs moved, not that the model got worse. With ``monitoring.rollback_signal: estimate`` the
monitor asks the estimate first: the window's estimated F1 (:func:`mlops_monitoring.estimation.estimate_performance`
on the served, calibrated scores) against the same estimate on the reference's scores (the training profile's
score ECDF, 1,001 quantiles, or the reference rows' ``score`` column):

- **drop**: even the upper end of the window's interval is more than ``monitoring.max_f1_drop`` (relative) below
  the reference estimate → CRITICAL, and the rollback is decided whatever drift says (a harmful shift below the
  PSI thresholds);
- **holds**: the lower end is within the limit → a CRITICAL drift is alerted but does not roll back (a shift the
  model absorbs);
- **inconclusive** (no scores, too few rows, a reference without scores, or the interval straddles the limit):
  drift decides, as with ``rollback_signal: drift``.

Realized quality (labels) always decides when it is CRITICAL: the estimate only stands in for labels not yet
arrived. The estimate is only as good as the calibration (the calibration gate, docs/monitoring.md): under
concept shift it holds while the model degrades, which drift cannot see either.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from mlops_config import MonitoringConfig
from mlops_model import LEGACY_THRESHOLD
from mlops_monitoring.estimation import estimate_performance

SCORE = "score"
Verdict = Literal["drop", "holds", "inconclusive"]


@dataclass(frozen=True)
class EstimatedDrop:
    """The window's estimated F1 against the reference's, and what it says about a rollback."""

    verdict: Verdict
    reason: str
    window_f1: float | None = None
    window_interval: tuple[float, float] | None = None
    reference_f1: float | None = None
    drop: float | None = None
    max_drop: float = 0.0
    n: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def reference_scores(reference: dict[str, Any] | pd.DataFrame | None) -> np.ndarray | None:
    """The reference's served scores: a profile's score ECDF (equally weighted quantiles), or reference rows'
    ``score`` column; ``None`` when the reference holds no scores."""
    if isinstance(reference, pd.DataFrame):
        return reference[SCORE].to_numpy(dtype=np.float64) if SCORE in reference.columns else None
    if isinstance(reference, dict):
        ecdf = (reference.get("score") or {}).get("ecdf")
        return np.asarray(ecdf, dtype=np.float64) if ecdf else None
    return None


def estimated_drop(window: Any, reference: Any, monitoring: MonitoringConfig, *,
                   threshold: float | None = None) -> EstimatedDrop:
    """CBPE F1 of the ``window`` scores against the ``reference`` scores, at ``threshold``.

    Args:
        window: The window's served scores (``None``: the log carries none).
        reference: The reference's scores (:func:`reference_scores`; ``None``: none recorded).
        monitoring: ``max_f1_drop``, ``estimate_interval`` and ``min_rows``.
        threshold: The served version's decision threshold (:func:`mlops_monitoring.quality.served_threshold`);
            ``None``: ``monitoring.decision_threshold``, else the legacy 0.5.
    """
    limit = monitoring.max_f1_drop
    t = threshold if threshold is not None else (monitoring.decision_threshold or LEGACY_THRESHOLD)
    if window is None or reference is None:
        missing = "window" if window is None else "reference"
        return EstimatedDrop("inconclusive", f"the {missing} holds no scores to estimate from", max_drop=limit)
    w = np.asarray(window, dtype=np.float64).ravel()
    r = np.asarray(reference, dtype=np.float64).ravel()
    if len(w) < monitoring.min_rows:
        return EstimatedDrop("inconclusive", f"{len(w)} scores in the window, fewer than monitoring.min_rows="
                             f"{monitoring.min_rows}", max_drop=limit, n=len(w))
    ref = estimate_performance(r, t, interval=monitoring.estimate_interval).f1
    est = estimate_performance(w, t, interval=monitoring.estimate_interval)
    lo, hi = est.intervals.get("f1", (est.f1, est.f1))
    base = dict(window_f1=est.f1, window_interval=(lo, hi), reference_f1=ref, max_drop=limit, n=len(w))
    if ref <= 0:
        return EstimatedDrop("inconclusive", f"the reference's estimated F1 is {ref:.4f}: nothing to drop from",
                             **base)  # type: ignore[arg-type]
    floor, drop = ref * (1 - limit), 1 - est.f1 / ref
    figures = (f"estimated F1 {est.f1:.4f} ({monitoring.estimate_interval:.0%} interval [{lo:.4f}, {hi:.4f}]) vs "
               f"the reference's {ref:.4f} at threshold {t:.4g}: {drop:+.1%} (limit {limit:.0%}, floor {floor:.4f})")
    if hi < floor:
        return EstimatedDrop("drop", figures, drop=drop, **base)  # type: ignore[arg-type]
    if lo >= floor:
        return EstimatedDrop("holds", figures, drop=drop, **base)  # type: ignore[arg-type]
    return EstimatedDrop("inconclusive", f"the interval straddles the floor: {figures}", drop=drop,
                         **base)  # type: ignore[arg-type]


def should_roll_back(monitoring: MonitoringConfig, *, drift_critical: bool, quality_critical: bool,
                    estimate: EstimatedDrop | None) -> tuple[bool, str]:
    """Whether the run's verdict calls for the drift rollback under ``monitoring.rollback_signal``, and why (to which
    version is ``choose_fallback``'s answer)."""
    if quality_critical:
        return True, "realized quality (labels) is CRITICAL"
    if monitoring.rollback_signal == "drift" or estimate is None or estimate.verdict == "inconclusive":
        why = "" if monitoring.rollback_signal == "drift" or estimate is None else \
            f" (the estimate cannot tell: {estimate.reason})"
        return drift_critical, ("drift is CRITICAL" if drift_critical else "nothing is CRITICAL") + why
    if estimate.verdict == "drop":
        return True, f"the estimated performance dropped: {estimate.reason}"
    return False, f"drift {'is CRITICAL but ' if drift_critical else 'is below CRITICAL and '}the estimated " \
                  f"performance holds: {estimate.reason}"
