"""Errors of drift monitoring; all derive from :class:`mlops_core.errors.PlatformError`."""

from __future__ import annotations

from mlops_core import PlatformError


class MonitoringError(PlatformError):
    """Monitoring cannot run: bad input frames, an unreadable prediction log or profile, too few rows."""


class AlertDeliveryError(MonitoringError):
    """An alert could not be delivered (webhook refused or unreachable)."""
