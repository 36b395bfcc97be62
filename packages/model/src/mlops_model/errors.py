"""Errors of the model contract; all derive from :class:`mlops_core.errors.PlatformError`."""

from __future__ import annotations

from mlops_core import PlatformError


class ModelContractError(PlatformError):
    """Root of the model-contract errors."""


class EncoderSpecError(ModelContractError):
    """An encoder spec is malformed, or rows cannot be encoded with it (a missing or non-numeric column)."""


class ExportedModelError(ModelContractError):
    """An exported model folder is missing a file, corrupt, or of an unknown format."""


class ModelKindError(ModelContractError):
    """A model's family cannot be told: an unknown or missing ``kind``, or a training section naming no family."""


class StatisticsError(ModelContractError):
    """A statistic got inputs it is not defined for (empty samples, mismatched bins, non-binary labels)."""


class ModelSignatureError(ExportedModelError):
    """An exported model is unsigned, differs from what was signed, or its signature was made by another key."""
