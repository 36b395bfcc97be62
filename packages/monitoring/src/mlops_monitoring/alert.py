"""Alerts and their actions: INFO is logged, WARNING is POSTed to the webhook, CRITICAL also decides a rollback.

Every alert carries its evidence: the window, the columns at INFO or above with their PSI / statistic /
p-value, realized quality when labels arrived, and the reasons in words.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from mlops_config import MonitoringConfig, TrackingConfig
from mlops_core import PlatformError
from mlops_monitoring.drift import DriftReport
from mlops_monitoring.notify import notify
from mlops_monitoring.policy import Level
from mlops_monitoring.quality import RealizedQuality

log = logging.getLogger(__name__)

ACTOR = "monitoring"


@dataclass(frozen=True)
class Alert:
    """What a run concluded and the evidence behind it."""

    model: str
    level: str
    reasons: list[str]
    window: dict[str, Any]
    evidence: dict[str, dict[str, Any]]
    quality: dict[str, Any] | None = None
    report_path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the webhook's body)."""
        return asdict(self)


@dataclass
class ActionResult:
    """One action taken (or attempted) for an alert."""

    action: str
    ok: bool
    detail: str
    extra: dict[str, Any] = field(default_factory=dict)


def build_alert(
    model: str, level: Level, reasons: list[str], report: DriftReport, quality: RealizedQuality | None,
    report_path: Path | None = None,
) -> Alert:
    """Gather the evidence of every column at INFO or above into an :class:`Alert`."""
    evidence = {
        name: {"psi": col.psi, "method": col.method, "statistic": col.statistic, "p_value": col.p_value,
               "severity": col.severity}
        for name, col in report.columns.items()
        if col.severity != Level.OK.value
    }
    return Alert(
        model=model, level=level.value, reasons=list(reasons), window=dict(report.window), evidence=evidence,
        quality=quality.to_dict() if quality else None, report_path=str(report_path) if report_path else None,
    )


@dataclass(frozen=True)
class RollbackDecision:
    """What a CRITICAL run asks of the layer above: serve ``to_version`` instead of ``from_version``.

    Monitoring decides; it does not deploy. The layer that composes monitoring with delivery
    (``mlops_pipeline.roll_back_to_fallback``) carries the decision out: the GitOps commit first, then the
    registry alias and the ledger entry.
    """

    model: str
    from_version: str | None
    """The version the drift was measured on (the served alias's version when the run started)."""
    to_version: str | None
    """The registry's ``fallback`` version then (``None``: there is none to roll back to)."""
    reason: str
    level: str
    actor: str = ACTOR
    problem: str | None = None
    """Why no target could be named (registry unreachable, no fallback), when ``to_version`` is ``None``."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form."""
        return asdict(self)


RollbackExecutor = Callable[[RollbackDecision], ActionResult]
"""Carries a :class:`RollbackDecision` out and reports how it went (supplied by the layer above)."""


def dispatch(
    alert: Alert, monitoring: MonitoringConfig, *, state_file: Path, decision: RollbackDecision | None = None,
    execute: RollbackExecutor | None = None, dry_run: bool = False, now: datetime | None = None,
) -> list[ActionResult]:
    """Take the actions the alert's level calls for; each outcome is returned, failures included.

    Alerts (fire at WARNING and above, resolve when the level drops) go out first, after whatever an
    earlier run could not deliver (the outbox in ``state_file``). At CRITICAL, ``decision`` is handed to
    ``execute``; without an executor it is reported as decided but not carried out. ``dry_run`` reports
    the rollback CRITICAL calls for without doing it.
    """
    level = Level(alert.level)
    results: list[ActionResult] = []
    if level is not Level.OK:
        log_fn = log.info if level is Level.INFO else log.warning
        log_fn("%s alert for %s: %s", level.value, alert.model, "; ".join(alert.reasons))
        results.append(ActionResult("log", True, level.value))
    if monitoring.webhook_url:
        generator = Path(alert.report_path).resolve().as_uri() if alert.report_path else ""
        for sent in notify(alert.to_dict(), monitoring, state_file, now=now, generator_url=generator):
            results.append(ActionResult("webhook", sent.ok, sent.detail,
                                        {"url": sent.url, "kind": sent.kind, "status": sent.status,
                                         "outbox": str(state_file)}))
    elif level.rank >= Level.WARNING.rank:
        results.append(ActionResult("webhook", False, "no monitoring.webhook_url configured"))
    if level is Level.CRITICAL:
        if not monitoring.auto_rollback:
            results.append(ActionResult("rollback", False, "monitoring.auto_rollback is false"))
        elif dry_run:
            results.append(ActionResult("rollback", False, "skipped: dry run (--dry-run)"))
        elif decision is None or decision.to_version is None:
            why = decision.problem if decision is not None else "no decision was made"
            results.append(ActionResult("rollback", False, f"cannot roll back {alert.model}: {why}", {"failed": True}))
        elif execute is None:
            results.append(ActionResult("rollback", False, "decided, not carried out: no executor given "
                                        "(mlops_pipeline.run_monitoring carries it out)",
                                        {"decision": decision.to_dict()}))
        else:
            try:
                results.append(execute(decision))
            except PlatformError as exc:  # the alert is out; the failure is reported and fails the run
                log.error("rollback of %s failed: %s", alert.model, exc)
                results.append(ActionResult("rollback", False, f"rollback failed: {exc}", {"failed": True}))
    return results


def choose_fallback(tracking: TrackingConfig, root: Path, model: str, served_alias: str,
                    alert: Alert) -> RollbackDecision:
    """Which versions the drift rollback a CRITICAL ``alert`` calls for moves between: from the version
    ``served_alias`` names to the ``fallback`` (whether to roll back at all is ``should_roll_back``'s answer)."""
    from mlops_core import FALLBACK, aliases

    reason = (f"drift monitor {alert.level}: " + "; ".join(alert.reasons))[:1000]
    try:
        current = aliases(tracking, root, model)
    except PlatformError as exc:
        return RollbackDecision(model, None, None, reason, alert.level, problem=f"registry: {exc}")
    source, target = current.get(served_alias), current.get(FALLBACK)
    problem = None if target else (f"the registry has no {FALLBACK!r} version (aliases: {current}); a fallback "
                                   "exists once a second version has become champion")
    return RollbackDecision(model, source, target, reason, alert.level, problem=problem)
