"""The GitOps half of the drift rollback: the overlay commit that makes the cluster serve the fallback.

Argo CD deploys what the overlay at the branch's HEAD says, so that commit *is* the rollback; the registry
alias (:func:`mlops_core.restore_champion`) and the ledger entry that follow only record it. The change goes
through the one overlay writer (:func:`mlops_delivery.overlay.write_overlay`) in a fresh shallow clone of
``delivery.gitops_repo``, per ``delivery.commit_mode``: a commit pushed without force (git's compare-and-swap;
a rejected push means another writer moved the branch, typically a second monitor rolling back the same
version, so the overlay is read again: of two monitors firing at once exactly one commit lands and both report
it), or a branch and a pull request.

Re-running is safe: an overlay that already serves the fallback is left alone and the commit that put it there
is reported; in pull-request mode a branch already holding the change is reported, not pushed again. An overlay
that serves neither the drifted version nor the fallback (someone promoted in between) is refused rather than
overwritten.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlops_config import DeliveryConfig
from mlops_delivery.errors import PromotionRefusedError
from mlops_delivery.git import run_git
from mlops_delivery.manifest import storage_uri
from mlops_delivery.overlay import cloned_checkout, write_overlay
from mlops_delivery.promotion import ManifestChange, load_manifest, manifest_change, stage_env

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FallbackCommit:
    """Where the overlay of ``env`` stands after the GitOps step, and which commit put it there."""

    model: str
    env: str
    from_version: int
    to_version: int
    storage_uri: str
    commit: str
    """SHA of the commit whose overlay serves ``to_version`` (at the remote's branch, or on ``branch``)."""
    created: bool
    """``True``: this call made and pushed the commit; ``False``: it was already there (a re-run, or a
    concurrent monitor won the push)."""
    path: str
    """The overlay's model manifest, relative to the repository root."""
    attempts: int = 1
    branch: str | None = None
    """Pull-request mode: the branch holding the commit (``None``: committed on ``delivery.git_branch``)."""
    pull_request: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form."""
        return dict(self.__dict__)


def plan_fallback(delivery: DeliveryConfig, root: Path, model: str, env: str, *, from_version: int,
                  to_version: int, reason: str) -> ManifestChange:
    """Edit the overlay of ``env`` under ``root`` in memory to serve ``to_version`` instead of ``from_version``.

    Raises:
        PromotionRefusedError: the overlay serves another version, or names a different previous version.
    """
    manifest = load_manifest(delivery, root, model, env)
    rel = str(manifest.path.relative_to(root))
    now = manifest.placement()
    action = f"rollback {model} in {env}: v{from_version} -> v{to_version}"
    message = f"gitops: {action}\n\n{reason}\n\nMlops-Rollback: {model} {env} v{from_version} -> v{to_version}\n"
    if now.stable_version == to_version and now.canary_version is None:
        return manifest_change(manifest, root, action, now, message)  # already serves it: no diff
    if now.stable_version != from_version:
        canary = f" with canary v{now.canary_version}" if now.canary_version is not None else ""
        raise PromotionRefusedError(
            f"the {env} overlay {rel!r} serves {model} v{now.stable_version}{canary}, neither the drifted "
            f"v{from_version} nor the fallback v{to_version}: it moved since the rollback was decided; "
            "refusing to overwrite it (revert by hand: mlops gitops rollback)")
    if now.previous_version is not None and now.previous_version != to_version:
        raise PromotionRefusedError(
            f"the {env} overlay {rel!r} names v{now.previous_version} as the previous version but the "
            f"registry's fallback is v{to_version}; the manifest is the truth: reconcile the registry first")
    manifest.restore_stable(to_version, storage_uri(delivery.storage_uri_template, model, to_version), None)
    return manifest_change(manifest, root, action, now, message)


def serve_fallback(
    delivery: DeliveryConfig, model: str, *, from_version: int, to_version: int, reason: str,
    env: str | None = None, repo: str | None = None,
) -> FallbackCommit:
    """Make the overlay of ``env`` serve ``to_version`` instead of ``from_version`` at the remote's HEAD.

    Args:
        delivery: ``gitops_repo``, ``git_branch``, ``commit_mode``, ``infra_dir``, ``model_manifest``,
            ``storage_uri_template``, ``git_author``, ``github_token_var`` (token for an https remote and for
            pull requests).
        model: Model name (the InferenceService's).
        from_version: The drifted version the overlay is expected to serve.
        to_version: The fallback to serve instead.
        reason: Why, for the commit message.
        env: Overlay to edit (default: the last of ``delivery.environments``, production).
        repo: Git URL or path (default ``delivery.gitops_repo``).

    Raises:
        PromotionRefusedError: the overlay serves another version, or names a different previous version.
        GitError: the repository cannot be cloned or pushed to, or the push kept losing the race.
    """
    repo = repo or delivery.gitops_repo
    if not repo:
        raise PromotionRefusedError("delivery.gitops_repo is not set: there is no GitOps repository to roll back in")
    where = env or stage_env(delivery, "production")

    def edit(root: Path) -> ManifestChange:
        return plan_fallback(delivery, root, model, where, from_version=from_version, to_version=to_version,
                             reason=reason)

    with cloned_checkout(delivery, repo) as checkout:
        change, written = write_overlay(delivery, checkout, edit, commit=True, push=True)
        rel = str(change.path.relative_to(checkout.root))
        found = written.commit or _last_commit(checkout.root, rel)
    if written.commit:
        logger.warning("rolled %s back in %s: v%s -> v%s (commit %s%s)", model, where, from_version, to_version,
                       found[:12], f" on branch {written.branch}" if written.branch else
                       ("" if written.pushed else ", pushed by another monitor"))
    else:
        logger.info("%s already serves %s v%s (commit %s)", where, model, to_version, found[:12])
    return FallbackCommit(model, where, from_version, to_version, change.after.storage_uri, found, written.pushed,
                          rel, written.attempts, written.branch, written.pull_request)


def _last_commit(clone: Path, rel: str) -> str:
    """The newest commit that touched ``rel`` (HEAD when the shallow history does not reach it)."""
    found = run_git(clone, "log", "-1", "--format=%H", "--", rel).stdout.strip()
    return found or run_git(clone, "rev-parse", "HEAD").stdout.strip()
