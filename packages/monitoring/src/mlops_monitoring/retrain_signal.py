"""What a CRITICAL monitoring run hands to the retraining trigger: the reason and the evidence behind it.

Monitoring must not import delivery (one floor), so, as with the rollback, it only *asks*: a
:class:`RetrainRequest` goes to a :data:`RetrainRequester` the layer above supplies
(``mlops_pipeline.retrain_requester``), which applies ``delivery.retrain``'s policy and opens or updates the
pull request. The answer comes back as the run's ``retrain`` action; its ``extra`` is the request's outcome.

The reason follows what made the run CRITICAL: the drift report itself (``drift``), else realized quality
from delayed labels (``performance``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mlops_monitoring.alert import ActionResult, RollbackDecision
from mlops_monitoring.drift import DriftReport
from mlops_monitoring.policy import Level
from mlops_monitoring.quality import RealizedQuality

ACTION = "retrain"
FAILED = "failed"


@dataclass(frozen=True)
class RetrainRequest:
    """A CRITICAL run's request for a retraining: the model, why, the evidence, and when (the run's ``now``)."""

    model: str
    reason: str
    evidence: dict[str, Any]
    now: datetime


RetrainRequester = Callable[[RetrainRequest], ActionResult]
"""Opens or updates the retraining pull request; answers an :class:`ActionResult` whose ``extra`` holds the
outcome (``status``: opened, updated, rate-limited, up_to_date, disabled or failed)."""


def retrain_reason(report: DriftReport) -> str:
    """``drift`` when the drift report itself is CRITICAL, else ``performance`` (realized quality made it so)."""
    return "drift" if report.level == Level.CRITICAL.value else "performance"


def retrain_evidence(model: str, level: str, reasons: list[str], report: DriftReport,
                     quality: RealizedQuality | None, decision: RollbackDecision | None,
                     actions: list[ActionResult], report_path: str) -> dict[str, Any]:
    """The evidence of a CRITICAL run: scalars first (they become the pull request's figures table), then the
    per-column statistics, realized quality, the rollback and the report's path."""
    drifted = report.drifted()
    rollback = next((a for a in actions if a.action == "rollback"), None)
    evidence: dict[str, Any] = {
        "summary": f"`mlops monitor run` said {level} for {model}: " + "; ".join(reasons[:3])
                   + (f" (+{len(reasons) - 3} more)" if len(reasons) > 3 else ""),
        "level": level,
        "drift_level": report.level,
        "max_psi": max((c.psi for c in report.columns.values()), default=0.0),
        "drifted_columns": len(drifted),
        "n_current": report.n_current,
        "n_reference": report.n_reference,
        "window_since": report.window.get("since"),
        "rolled_back": bool(rollback and rollback.ok),
        "report": report_path,
        "drifted": drifted,
        "reasons": list(reasons),
        "columns": {name: {"psi": c.psi, "method": c.method, "statistic": c.statistic, "p_value": c.p_value,
                           "severity": c.severity} for name, c in report.columns.items() if c.severity != "OK"},
        "quality": quality.to_dict() if quality is not None else None,
        "rollback": {"decided": decision.to_dict() if decision is not None else None,
                     "done": rollback.ok if rollback else False, "detail": rollback.detail if rollback else None},
    }
    if quality is not None:
        evidence.update(realized_f1=quality.f1, labelled=quality.n_labelled)
    return evidence


def request_retrain_on_critical(requester: RetrainRequester | None, request: RetrainRequest, *,
                                dry_run: bool) -> ActionResult | None:
    """Hand ``request`` to ``requester`` (``None``: monitoring alone, nothing to ask); a dry run only says so.

    A requester that raises is a bug above; the run's verdict and rollback stand, and the failure is reported.
    """
    if requester is None:
        return None
    if dry_run:
        return ActionResult(ACTION, True, f"skipped: dry run (would request a retraining, reason {request.reason})",
                            {"status": "dry-run", "reason": request.reason})
    try:
        return requester(request)
    except Exception as exc:  # the verdict and the rollback are done; report, never undo
        detail = f"{type(exc).__name__}: {exc}"
        return ActionResult(ACTION, False, detail, {"status": FAILED, "reason": request.reason, "detail": detail})
