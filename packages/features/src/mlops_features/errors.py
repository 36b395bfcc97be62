"""Errors of the data and feature layer; all derive from :class:`mlops_core.errors.PlatformError`."""

from __future__ import annotations

from mlops_core import PlatformError


class FeaturesError(PlatformError):
    """Base of every error this package raises on purpose."""


class DataError(FeaturesError):
    """Bad arguments for, or bad contents of, raw or validated data."""


class FeatureStoreError(FeaturesError):
    """The Feast repository is missing, not applied, or was asked for something it does not define."""


class FeatureStoreUnavailableError(FeatureStoreError):
    """The online store cannot be reached right now (e.g. Redis is down); callers may degrade and retry."""
