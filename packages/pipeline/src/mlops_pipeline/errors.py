"""Errors of the pipeline."""

from __future__ import annotations

from mlops_core import PlatformError


class PipelineError(PlatformError):
    """A pipeline step could not do its job (the message says which and why)."""
