"""Errors of drift monitoring; all derive from :class:`mlops_core.errors.PlatformError`."""

from __future__ import annotations

from mlops_core import PlatformError


class MonitoringError(PlatformError):
    """Monitoring cannot run: bad input frames, an unreadable prediction log or profile, too few rows."""


class AlertDeliveryError(MonitoringError):
    """An alert could not be delivered (webhook refused, redirected elsewhere, or unreachable).

    ``url`` is the configured receiver, ``status`` the HTTP status it answered (``None``: no answer).
    """

    exit_code = 1

    def __init__(self, message: str, *, url: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.status = status


class RollbackFailedError(MonitoringError):
    """A rollback the monitor decided on could not be carried out (the alert itself went out)."""

    exit_code = 1


class RetrainFailedError(MonitoringError):
    """A CRITICAL run's retraining request failed; the verdict, the alert and the rollback stand."""

    exit_code = 1
