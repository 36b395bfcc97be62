"""The platform's error hierarchy. Every package's ``errors.py`` derives from :class:`PlatformError`."""

from __future__ import annotations

from mlops_config import ConfigError, PlatformError


class TrackingError(PlatformError):
    """The tracking server or registry cannot be reached or refused a request."""


__all__ = ["ConfigError", "PlatformError", "TrackingError"]
