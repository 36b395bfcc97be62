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


class PushRejectedError(GitError):
    """A compare-and-swap push lost the race: the remote's ref was not where the change was built on.

    Names the remote, the ref, what the push expected there and what the remote actually holds (``None``: the ref
    does not exist), and the commit that was not pushed; ``hint`` says what to do about it.
    """

    def __init__(self, remote: str, ref: str, expected: str, actual: str | None, *, commit: str = "",
                 hint: str = "another writer moved it: read it again and re-run the change") -> None:
        self.remote, self.ref, self.expected, self.actual, self.commit = remote, ref, expected, actual, commit
        pushed = f"commit {commit[:12]} was not pushed" if commit else "nothing was pushed"
        super().__init__(f"push to {remote!r} rejected: {ref} is at {actual or 'nothing (no such ref)'}, expected "
                         f"{expected}; {pushed}; {hint}")

    def with_hint(self, hint: str) -> PushRejectedError:
        """The same rejection with another ``hint`` (what the caller's user should do)."""
        return PushRejectedError(self.remote, self.ref, self.expected, self.actual, commit=self.commit, hint=hint)


class MetricsError(DeliveryError):
    """Prometheus metrics or the prediction log cannot be read or lack what the analysis needs."""


class ShadowError(DeliveryError):
    """The shadow log holds nothing to analyse in the window, lacks the shadow columns, or an argument is bad."""
