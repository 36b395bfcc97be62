"""The fixed-threshold decision both canaries share: checks in, promote / hold / rollback and reasons out.

A check either passed, failed, could not be made (no evidence on one side, too few requests), or was made and
could not tell yet (its interval straddles its bound). Any missing evidence → ``hold`` (not enough evidence either
way); otherwise any failure → ``rollback``; otherwise any check that cannot tell yet → ``hold`` (it stops a
promotion, not another check's rollback); all passed → ``promote``. One reason per check, prefixed
``insufficient:``, ``FAILED:``, ``undecided:`` or ``ok:`` and ordered in that way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from mlops_config import DeliveryConfig
from mlops_delivery.sequential import Decision


@dataclass(frozen=True)
class Check:
    """One threshold check: what it compared and whether it ``failed`` (``None``: it could not be made, or with
    ``undecided`` it was made and its evidence cannot tell yet)."""

    text: str
    failed: bool | None
    undecided: bool = False


def requests_check(delivery: DeliveryConfig, canary_requests: float) -> Check | None:
    """``insufficient`` below ``delivery.min_canary_requests`` canary requests, else nothing to report."""
    if canary_requests < delivery.min_canary_requests:
        return Check(f"only {canary_requests:.0f} canary requests, need {delivery.min_canary_requests}", None)
    return None


def error_rate_check(delivery: DeliveryConfig, stable_rate: float | None, canary_rate: float | None) -> Check:
    """Canary's 5xx rate at most ``delivery.max_error_rate_increase`` above stable's."""
    if stable_rate is None or canary_rate is None:
        return Check("no requests on one side: cannot compare error rates", None)
    delta = canary_rate - stable_rate
    return Check(f"error rate canary {canary_rate:.4f} vs stable {stable_rate:.4f} "
                 f"({delta:+.4f}, max +{delivery.max_error_rate_increase})", delta > delivery.max_error_rate_increase)


def decide_checks(checks: Iterable[Check | None]) -> tuple[Decision, tuple[str, ...]]:
    """The decision and one reason per check (``None`` entries are skipped)."""
    made = [c for c in checks if c is not None]
    missing = [f"insufficient: {c.text}" for c in made if c.failed is None and not c.undecided]
    failed = [f"FAILED: {c.text}" for c in made if c.failed]
    undecided = [f"undecided: {c.text}" for c in made if c.failed is None and c.undecided]
    passed = [f"ok: {c.text}" for c in made if c.failed is False]
    if missing:
        return "hold", (*missing, *failed, *undecided, *passed)
    if failed:
        return "rollback", (*failed, *undecided, *passed)
    if undecided:
        return "hold", (*undecided, *passed)
    return "promote", tuple(passed)
