"""The GitOps half of a rollback: the commit on the environment overlay that makes the cluster serve the fallback.

Argo CD deploys what the overlay at the branch's HEAD says, so that commit *is* the rollback; the
registry alias and the ledger entry that follow only record it. The commit is made in a fresh shallow
clone of ``delivery.gitops_repo`` and pushed without force: the remote takes it only as a fast-forward
of the HEAD it was made on (git's compare-and-swap). A rejected push means another writer moved the
branch, typically a second monitor rolling back the same version; the clone is refreshed and the
overlay read again, so of two monitors firing at once exactly one commit lands and both report it.

Re-running is safe: an overlay that already serves the fallback is left alone and the commit that put
it there is reported. An overlay that serves neither the drifted version nor the fallback (someone
promoted in between) is refused rather than overwritten.
"""

from __future__ import annotations

import base64
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlops_config import DeliveryConfig
from mlops_delivery.errors import GitError, PromotionRefusedError
from mlops_delivery.git import commit_file, push_outcome, run_git
from mlops_delivery.manifest import storage_uri
from mlops_delivery.promotion import load_manifest, stage_env

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
HISTORY_DEPTH = 50
"""Commits fetched: enough to find the commit that already rolled the overlay back on a re-run."""


@dataclass(frozen=True)
class RollbackCommit:
    """Where the overlay of ``env`` stands after the GitOps step, and which commit put it there."""

    model: str
    env: str
    from_version: int
    to_version: int
    storage_uri: str
    commit: str
    """SHA of the commit at the remote whose overlay serves ``to_version``."""
    created: bool
    """``True``: this call made and pushed the commit; ``False``: it was already there (a re-run, or a
    concurrent monitor won the push)."""
    path: str
    """The overlay's model manifest, relative to the repository root."""
    attempts: int = 1

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form."""
        return dict(self.__dict__)


def _git_env(repo: str, token_var: str) -> dict[str, str]:
    """The environment for git: an https remote gets the token as a header, never on a command line."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    token = os.environ.get(token_var)
    if repo.startswith("https://") and token:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        env.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
                    "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}"})
    return env


def _clone(repo: str, branch: str, into: Path, env: dict[str, str]) -> None:
    proc = run_git(None, "clone", "--quiet", "--depth", str(HISTORY_DEPTH), "--single-branch", "--branch", branch,
                   repo, str(into), env=env)
    if proc.returncode != 0:
        detail = proc.stderr.strip().splitlines()
        raise GitError(f"cannot clone the GitOps repository {repo!r} (branch {branch!r}): "
                       f"{detail[-1] if detail else proc.returncode}; check delivery.gitops_repo / git_branch")


def _refresh(clone: Path, branch: str, env: dict[str, str]) -> None:
    for args in (("fetch", "--quiet", "--depth", str(HISTORY_DEPTH), "origin", branch),
                 ("reset", "--quiet", "--hard", "FETCH_HEAD")):
        proc = run_git(clone, *args, env=env)
        if proc.returncode != 0:
            raise GitError(f"`git {' '.join(args)}` failed in {str(clone)!r}: {proc.stderr.strip()}")


def _last_commit(clone: Path, rel: str) -> str:
    """The newest commit that touched ``rel`` (HEAD when the shallow history does not reach it)."""
    found = run_git(clone, "log", "-1", "--format=%H", "--", rel).stdout.strip()
    return found or run_git(clone, "rev-parse", "HEAD").stdout.strip()


def commit_rollback(
    delivery: DeliveryConfig, model: str, *, from_version: int, to_version: int, reason: str,
    env: str | None = None, repo: str | None = None,
) -> RollbackCommit:
    """Make the overlay of ``env`` serve ``to_version`` instead of ``from_version`` at the remote's HEAD.

    Args:
        delivery: ``gitops_repo``, ``git_branch``, ``infra_dir``, ``model_manifest``, ``storage_uri_template``,
            ``git_author``, ``github_token_var`` (token for an https remote).
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
    env = env or stage_env(delivery, "production")
    git_env = _git_env(repo, delivery.github_token_var)
    uri = storage_uri(delivery.storage_uri_template, model, to_version)
    with tempfile.TemporaryDirectory(prefix="mlops-rollback-") as tmp:
        clone = Path(tmp) / "repo"
        _clone(repo, delivery.git_branch, clone, git_env)
        for attempt in range(1, MAX_ATTEMPTS + 1):
            manifest = load_manifest(delivery, clone, model, env)
            rel = str(manifest.path.relative_to(clone))
            now = manifest.placement()
            if now.stable_version == to_version and now.canary_version is None:
                sha = _last_commit(clone, rel)
                logger.info("%s already serves %s v%s (commit %s)", env, model, to_version, sha[:12])
                return RollbackCommit(model, env, from_version, to_version, now.storage_uri, sha, False, rel, attempt)
            if now.stable_version != from_version:
                canary = f" with canary v{now.canary_version}" if now.canary_version is not None else ""
                raise PromotionRefusedError(
                    f"the {env} overlay {rel!r} serves {model} v{now.stable_version}{canary}, neither the drifted "
                    f"v{from_version} nor the fallback v{to_version}: it moved since the rollback was decided; "
                    "refusing to overwrite it (roll back by hand: mlops gitops rollback)")
            if now.previous_version is not None and now.previous_version != to_version:
                raise PromotionRefusedError(
                    f"the {env} overlay {rel!r} names v{now.previous_version} as the previous version but the "
                    f"registry's fallback is v{to_version}; the manifest is the truth: reconcile the registry first")
            manifest.restore_stable(to_version, uri, None)
            manifest.path.write_text(manifest.dump(), encoding="utf-8")
            message = (f"gitops: rollback {model} in {env}: v{from_version} -> v{to_version}\n\n{reason}\n\n"
                       f"Mlops-Rollback: {model} {env} v{from_version} -> v{to_version}\n")
            sha = commit_file(clone, manifest.path, message, delivery.git_author)
            outcome = push_outcome(clone, "origin", delivery.git_branch, env=git_env)
            if outcome != "rejected":  # up_to_date: a concurrent monitor pushed this very commit first
                logger.warning("rolled %s back in %s: v%s -> v%s (commit %s%s)", model, env, from_version, to_version,
                               sha[:12], ", pushed by another monitor" if outcome == "up_to_date" else "")
                return RollbackCommit(model, env, from_version, to_version, uri, sha, outcome == "pushed", rel,
                                      attempt)
            _refresh(clone, delivery.git_branch, git_env)  # someone pushed first: read the overlay again
    raise GitError(f"the push of the {model} rollback to {repo!r} was rejected {MAX_ATTEMPTS} times in a row: "
                   "the branch keeps moving; retry")
