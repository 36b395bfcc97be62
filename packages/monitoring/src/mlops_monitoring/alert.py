"""Alerts and their actions: INFO is logged, WARNING is POSTed to the webhook, CRITICAL also rolls back.

Every alert carries its evidence: the window, the columns at INFO or above with their PSI / statistic /
p-value, realized quality when labels arrived, and the reasons in words.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mlops_config import MonitoringConfig, TrackingConfig
from mlops_monitoring.drift import DriftReport
from mlops_monitoring.errors import AlertDeliveryError, MonitoringError
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


def post_webhook(url: str, payload: dict[str, Any], *, token_env: str | None, timeout_s: float) -> int:
    """POST ``payload`` as JSON; returns the HTTP status.

    Raises:
        MonitoringError: ``token_env`` names an env var that is not set.
        AlertDeliveryError: the receiver answered with an error or could not be reached.
    """
    headers = {"Content-Type": "application/json", "User-Agent": "mlops-monitoring"}
    if token_env:
        token = os.environ.get(token_env)
        if not token:
            raise MonitoringError(f"webhook token env var {token_env!r} is not set; export it or unset it in config")
        headers["Authorization"] = f"Bearer {token}"
    body = json.dumps(payload, default=str).encode("utf-8")
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        raise AlertDeliveryError(f"webhook {url!r} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise AlertDeliveryError(f"webhook {url!r} is unreachable: {reason}") from None


def roll_back(tracking: TrackingConfig, root: Path, model: str, alert: Alert) -> ActionResult:
    """Move ``champion`` back to the ``fallback`` version through the lifecycle API (recorded in the ledger)."""
    from mlops_core import rollback

    reason = f"drift monitor {alert.level}: " + "; ".join(alert.reasons)
    try:
        entry = rollback(tracking, root, model, reason=reason[:1000], actor=ACTOR)
    except Exception as exc:  # the ledger/registry reports why; the alert must still go out
        log.error("rollback of %s failed: %s", model, exc)
        return ActionResult("rollback", False, f"rollback failed: {exc}")
    done = entry.as_dict()
    return ActionResult("rollback", True, f"champion -> v{entry.version} (ledger #{entry.seq})",
                        {"version": entry.version, "seq": entry.seq, "replaced": done.get("extra", {}).get("replaced")})


def dispatch(
    alert: Alert, monitoring: MonitoringConfig, tracking: TrackingConfig, root: Path, *, rollback: bool = True
) -> list[ActionResult]:
    """Take the actions the alert's level calls for; each outcome is returned, failures included.

    ``rollback=False`` (a dry run) reports the rollback CRITICAL calls for without doing it.
    """
    level = Level(alert.level)
    results: list[ActionResult] = []
    if level is Level.OK:
        return results
    log_fn = log.info if level is Level.INFO else log.warning
    log_fn("%s alert for %s: %s", level.value, alert.model, "; ".join(alert.reasons))
    results.append(ActionResult("log", True, level.value))
    if level.rank >= Level.WARNING.rank:
        if monitoring.webhook_url:
            try:
                status = post_webhook(monitoring.webhook_url, alert.to_dict(), token_env=monitoring.webhook_token_env,
                                      timeout_s=monitoring.webhook_timeout_s)
                results.append(ActionResult("webhook", True, f"HTTP {status}", {"url": monitoring.webhook_url}))
            except AlertDeliveryError as exc:
                log.error("%s", exc)
                results.append(ActionResult("webhook", False, str(exc), {"url": monitoring.webhook_url}))
        else:
            results.append(ActionResult("webhook", False, "no monitoring.webhook_url configured"))
    if level is Level.CRITICAL:
        if not monitoring.auto_rollback:
            results.append(ActionResult("rollback", False, "monitoring.auto_rollback is false"))
        elif not rollback:
            results.append(ActionResult("rollback", False, "skipped: dry run (--dry-run)"))
        else:
            results.append(roll_back(tracking, root, alert.model, alert))
    return results
