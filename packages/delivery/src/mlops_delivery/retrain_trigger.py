"""An automatic retraining trigger: the policy's switches, then the same request ``mlops retrain request`` makes.

The monitor (drift, realized quality), ``mlops monitor performance`` (a realized or estimated drop) and the
ingestion (a new accepted data version) call :func:`trigger_retrain`; the layer above decides *when*. Here the
policy of ``delivery.retrain`` decides *whether*: ``enabled``, the trigger's own ``on_*`` switch and a configured
repository; then :func:`mlops_delivery.retrain.request_retrain` opens or updates the pull request (idempotent,
rate-limited, merged only with ``auto_merge``). Where the profile cannot hold such a pull request at all (no
repository, or no DVC remote publishing the versions a pin names) the trigger is ``disabled`` too, so a laptop's
or a registry-only profile's CRITICAL run does not fail for want of one.

A trigger runs after its command has done its own job (a verdict, a rollback, a published version), so it never
raises: a failure becomes the outcome ``failed`` with its reason, and the caller makes it visible (the commands
exit non-zero after printing everything else) without undoing what came before.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from mlops_config import DataConfig, DeliveryConfig
from mlops_delivery.retrain import RetrainOutcome, RetrainTrigger, _iso, _record, request_retrain

logger = logging.getLogger(__name__)

SWITCHES = {"drift": "on_drift", "performance": "on_performance", "estimated_performance": "on_estimated_performance",
            "data": "on_data"}
"""Trigger name → its ``delivery.retrain`` switch. ``estimated_performance`` requests with reason ``performance``."""

FAILED, DISABLED = "failed", "disabled"


def trigger_retrain(delivery: DeliveryConfig, data: DataConfig, root: Path, trigger: RetrainTrigger, *,
                    switch: str | None = None, now: datetime | None = None, ledger: Path | None = None,
                    environ: Mapping[str, str] | None = None) -> RetrainOutcome:
    """Request ``trigger``'s retraining if ``delivery.retrain`` allows it; never raises.

    Args:
        delivery: ``delivery`` (``retrain``'s switches and policy, the repository).
        data: ``data`` (the published versions).
        root: Repository root.
        trigger: Model, reason, evidence and (reason ``data``) the version to pin.
        switch: Which trigger fired (a key of :data:`SWITCHES`); default ``trigger.reason``.
        now: The trigger's time (the rate limit's clock; default now).
        ledger: JSON-lines file every outcome is appended to (``disabled`` and ``failed`` included).
        environ: Environment for the GitHub backend.

    Returns:
        The outcome: ``opened``, ``updated``, ``rate-limited``, ``up_to_date`` (from the request), ``disabled``
        (``detail`` names the switch) or ``failed`` (``detail`` holds the error).
    """
    retrain, name = delivery.retrain, switch or trigger.reason
    if name not in SWITCHES:
        raise ValueError(f"unknown retrain trigger {name!r}; expected one of {sorted(SWITCHES)}")  # caller's bug
    moment = (now or datetime.now(UTC)).astimezone(UTC)
    off = None
    if not retrain.enabled:
        off = "delivery.retrain.enabled is false"
    elif not getattr(retrain, SWITCHES[name]):
        off = f"delivery.retrain.{SWITCHES[name]} is false"
    elif not (retrain.repo or delivery.gitops_repo):
        off = "no repository to open it on (delivery.retrain.repo and delivery.gitops_repo are unset)"
    elif trigger.data_version is None and not data.dvc_remote:
        off = "no published data version to pin (data.dvc_remote is unset)"
    if off is not None:
        return _record(_outcome(trigger, retrain.branch, moment, DISABLED, f"{name} trigger off: {off}"), ledger)
    try:
        return request_retrain(delivery, data, root, trigger, now=moment, environ=environ, ledger=ledger)
    except Exception as exc:  # any failure is reported, never allowed to undo the caller's work
        logger.exception("retrain %s (%s trigger) failed", trigger.model, name)
        detail = f"{type(exc).__name__}: {exc}"
        return _record(_outcome(trigger, retrain.branch, moment, FAILED, detail), ledger)


def _outcome(trigger: RetrainTrigger, branch: str, moment: datetime, status: str, detail: str) -> RetrainOutcome:
    return RetrainOutcome(model=trigger.model, reason=trigger.reason, status=status,
                          data_version=trigger.data_version or "", branch=branch.format(model=trigger.model),
                          requested_at=_iso(moment), pushed=False, detail=detail, evidence=dict(trigger.evidence))
