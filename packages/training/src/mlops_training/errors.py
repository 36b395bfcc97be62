"""Errors of the training package; all derive from :class:`mlops_core.errors.PlatformError`."""

from __future__ import annotations

from mlops_core import PlatformError


class TrainingError(PlatformError):
    """Training cannot start or failed: bad model name, data missing, workers exited non-zero."""


class DoctorError(TrainingError):
    """The pre-flight doctor found a config that is known to fail; nothing was started."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("config refused before any worker started: " + "; ".join(self.problems))


class CheckpointError(TrainingError):
    """A checkpoint is missing, incomplete or does not match its manifest."""


class RunLockedError(TrainingError):
    """Another live launcher already trains this run (same run name, same node); nothing was started."""


__all__ = ["CheckpointError", "DoctorError", "PlatformError", "RunLockedError", "TrainingError"]
