"""Errors of the evaluation package."""

from __future__ import annotations

from mlops_core import PlatformError


class EvaluationError(PlatformError):
    """The evaluation cannot run: bad input, a missing model or holdout, mismatched arrays."""
