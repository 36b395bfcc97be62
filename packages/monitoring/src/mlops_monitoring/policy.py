"""The alert policy: from PSI and realized quality to ``OK`` / ``INFO`` / ``WARNING`` / ``CRITICAL``.

Per column (thresholds from the ``monitoring`` config section):

- PSI > ``psi_critical`` on a key feature or on the prediction score → CRITICAL;
  on any other feature → WARNING (it moved a lot, but the model does not lean on it);
- PSI ≥ ``psi_warning`` → WARNING;  PSI ≥ ``psi_info`` → INFO;  otherwise OK.

Realized quality (delayed labels): F1 < ``min_f1`` → CRITICAL; F1 more than ``max_f1_drop`` (relative)
below the reference F1 (the served version's validation F1 at its recorded threshold:
:func:`mlops_monitoring.quality.validation_reference`) → WARNING; the label rate more than ``max_prior_ratio``
times above (or below) the reference's → WARNING (prior drift: the inputs may look the same while the base rate
moved).
The window's level is the highest of its columns' and quality's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from mlops_config import MonitoringConfig

if TYPE_CHECKING:
    from mlops_model import ReferenceF1
    from mlops_monitoring.quality import RealizedQuality


class Level(StrEnum):
    """Alert levels, in increasing order of severity."""

    OK = "OK"
    INFO = "INFO"
    WARNING = "WARNING"
    CRITICAL = "CRITICAL"

    @property
    def rank(self) -> int:
        """0 for OK up to 3 for CRITICAL."""
        return list(Level).index(self)


def highest(levels: Iterable[Level]) -> Level:
    """The most severe of ``levels`` (OK when there are none)."""
    return max(levels, key=lambda lv: lv.rank, default=Level.OK)


def column_severity(psi: float, *, key: bool, monitoring: MonitoringConfig) -> Level:
    """Severity of one column's PSI; ``key`` marks key features and the prediction score."""
    if psi > monitoring.psi_critical:
        return Level.CRITICAL if key else Level.WARNING
    if psi >= monitoring.psi_warning:
        return Level.WARNING
    if psi >= monitoring.psi_info:
        return Level.INFO
    return Level.OK


def drift_level(columns: Mapping[str, Any], monitoring: MonitoringConfig) -> tuple[Level, list[str]]:
    """The window's drift level and one reason per column at INFO or above, worst first."""
    flagged = [(name, col) for name, col in columns.items() if Level(col.severity) is not Level.OK]
    flagged.sort(key=lambda item: (-Level(item[1].severity).rank, -item[1].psi))
    reasons = []
    for name, col in flagged:
        severity = Level(col.severity)
        if severity is Level.CRITICAL:
            why = f"> {monitoring.psi_critical} on a key column"
        elif col.psi > monitoring.psi_critical:
            why = f"> {monitoring.psi_critical} (not a key feature)"
        else:
            why = f">= {monitoring.psi_warning if severity is Level.WARNING else monitoring.psi_info}"
        reasons.append(f"{severity.value}: {name} PSI {col.psi:.4f} {why}")
    return highest(Level(col.severity) for _, col in flagged), reasons


def quality_level(
    quality: RealizedQuality | None, monitoring: MonitoringConfig, reference: Mapping[str, float] | None = None,
    reference_f1: ReferenceF1 | None = None,
) -> tuple[Level, list[str]]:
    """The level realized quality calls for, with its reasons (OK and no reason without labels).

    ``reference`` holds what validation measured: ``f1`` and ``positive_rate`` (either may be absent).
    ``reference_f1`` (:func:`mlops_monitoring.quality.validation_reference`), when given, is the F1 to compare
    with instead of ``reference["f1"]``, and its note names the figure and its threshold in the reason.
    """
    if quality is None or quality.n_labelled == 0:
        return Level.OK, []
    reference = reference or {}
    levels, reasons = [], []
    ref_rate = reference.get("positive_rate")
    if reference_f1 is not None:
        ref_f1, what = reference_f1.value, reference_f1.note
    else:
        ref_f1 = reference.get("f1")
        what = f"the reference F1 {ref_f1:.4f}" if ref_f1 is not None else ""
    if quality.f1 < monitoring.min_f1:
        levels.append(Level.CRITICAL)
        reasons.append(f"CRITICAL: realized F1 {quality.f1:.4f} < min_f1 {monitoring.min_f1}")
    elif ref_f1 and quality.f1 < ref_f1 * (1 - monitoring.max_f1_drop):
        levels.append(Level.WARNING)
        reasons.append(
            f"WARNING: realized F1 {quality.f1:.4f} at threshold {quality.threshold:.4g} is "
            f"{1 - quality.f1 / ref_f1:.1%} below {what} (max_f1_drop {monitoring.max_f1_drop:.0%})"
        )
    if ref_rate and quality.positive_rate:
        ratio = quality.positive_rate / ref_rate
        if ratio > monitoring.max_prior_ratio or ratio < 1 / monitoring.max_prior_ratio:
            levels.append(Level.WARNING)
            reasons.append(
                f"WARNING: label rate {quality.positive_rate:.4f} is {ratio:.2f}x the reference "
                f"{ref_rate:.4f} (max_prior_ratio {monitoring.max_prior_ratio})"
            )
    return highest(levels), reasons
