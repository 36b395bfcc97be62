"""Errors of GitOps delivery; each names the bad value and what to do about it."""

from __future__ import annotations

from mlops_core import PlatformError


class DeliveryError(PlatformError):
    """Base of every delivery error."""


class ManifestError(DeliveryError):
    """An overlay's model manifest is missing, malformed, or not in the shape promotions expect."""


class PromotionRefusedError(DeliveryError):
    """A promotion would skip a stage, or the version's gates did not pass."""


class GitError(DeliveryError):
    """A git command needed to record a promotion failed."""


class MetricsError(DeliveryError):
    """Prometheus metrics or the prediction log cannot be read or lack what the analysis needs."""


class ShadowError(DeliveryError):
    """The shadow log holds nothing to analyse in the window, lacks the shadow columns, or an argument is bad."""
