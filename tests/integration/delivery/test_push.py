"""Pushing promotions: to a real bare git remote, directly (commit mode) or as a branch plus a pull request.

GitHub cannot be reached from here, so the pull-request call goes to a small local HTTP endpoint that records
what it is sent and answers like GitHub's "create a pull request" (tests/support/github.py); the git side is real.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mlops_config import DeliveryConfig
from mlops_delivery import GitError, plan_promotion
from mlops_delivery.promotion import apply_change

pytestmark = pytest.mark.integration

STAGING = "infra/overlays/staging/model-fraud.yaml"
PRODUCTION = "infra/overlays/production/model-fraud.yaml"


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def clone(tmp_path: Path, repo_root: Path) -> Path:
    """A working copy of infra/ whose `origin` is a real bare repository."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    root = tmp_path / "work"
    shutil.copytree(repo_root / "infra", root / "infra")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "init")
    git(root, "remote", "add", "origin", str(remote))
    git(root, "push", "-q", "origin", "main")
    return root


def test_commit_mode_pushes_the_promotion_to_the_remote(clone: Path) -> None:
    cfg = DeliveryConfig()
    change = apply_change(plan_promotion(cfg, clone, "fraud", 4, "staging"), cfg, clone, commit=True, push=True)
    assert change.pushed and change.branch is None
    assert git(clone, "rev-parse", "origin/main") == git(clone, "ls-remote", "origin", "refs/heads/main").split()[0]
    assert git(clone, "ls-remote", "origin", "refs/heads/main").split()[0] == change.commit


def test_pull_request_mode_pushes_a_branch_and_opens_a_pull_request(clone: Path,
                                                                   github_pulls: list[dict[str, Any]]) -> None:
    cfg = DeliveryConfig(commit_mode="pull_request")
    before = (clone / STAGING).read_text()
    change = apply_change(plan_promotion(cfg, clone, "fraud", 4, "staging"), cfg, clone, commit=True, push=True)
    assert change.branch == "gitops/fraud-staging-v4"
    assert change.pull_request == "https://github.example/o/r/pull/1"
    # the working copy is back on main, untouched; the commit lives on the pushed branch only
    assert git(clone, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert (clone / STAGING).read_text() == before
    assert git(clone, "ls-remote", "origin", "refs/heads/gitops/fraud-staging-v4").split()[0] == change.commit
    assert git(clone, "show", "--name-only", "--format=", change.commit) == STAGING
    (call,) = github_pulls
    assert call["path"] == "/repos/o/r/pulls" and call["auth"] == "Bearer t0ken"
    assert call["body"]["head"] == "gitops/fraud-staging-v4" and call["body"]["base"] == "main"
    assert call["body"]["title"] == "gitops: serve fraud v4 in staging"
    assert '+    mlops.platform/stable-version: "4"' in call["body"]["body"]


def test_pull_request_mode_names_a_missing_token(clone: Path, github_pulls: list[dict[str, Any]],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_TOKEN")
    cfg = DeliveryConfig(commit_mode="pull_request")
    with pytest.raises(GitError, match=r"env var 'GITHUB_TOKEN' \(delivery.github_token_var\) is not set"):
        apply_change(plan_promotion(cfg, clone, "fraud", 4, "staging"), cfg, clone, commit=True, push=True)
    assert github_pulls == []
    assert git(clone, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert git(clone, "branch", "--list", "gitops/*") == ""  # nothing was committed or pushed
    assert git(clone, "ls-remote", "origin", "refs/heads/gitops/*") == ""


def _push_from_another_clone(remote: str, tmp: Path, rel: str, version: int) -> str:
    """Another writer: its own clone sets ``rel`` to serve ``version`` and pushes; returns its commit."""
    from mlops_delivery import ModelManifest

    other = tmp / f"other-{version}"
    git(tmp, "clone", "-q", "-b", "main", remote, str(other))
    manifest = ModelManifest(other / rel, rel.split("/")[-2], "fraud")
    manifest.set_stable(version, f"s3://mlops-artifacts/models/fraud/v{version}")
    (other / rel).write_text(manifest.dump())
    git(other, "-c", "user.name=o", "-c", "user.email=o@example.com", "commit", "-qam", f"other: v{version}")
    git(other, "push", "-q", "origin", "main")
    return git(other, "rev-parse", "HEAD")


def test_a_push_that_loses_the_race_is_planned_again_on_the_new_tip(clone: Path, tmp_path: Path) -> None:
    """The compare-and-swap: a writer that moved main between our read and our push is kept, not overwritten;
    the edit runs again on its commit and lands on top (the old ``push_head`` raised GitError here)."""
    from mlops_delivery import local_checkout, write_overlay

    cfg = DeliveryConfig()
    remote = git(clone, "remote", "get-url", "origin")
    calls: list[str] = []

    def edit(root: Path):  # the other writer pushes while our first plan is in flight
        calls.append(git(root, "rev-parse", "HEAD"))
        if len(calls) == 1:
            _push_from_another_clone(remote, tmp_path, PRODUCTION, 7)
        return plan_promotion(cfg, root, "fraud", 4, "staging")

    change, written = write_overlay(cfg, local_checkout(cfg, clone), edit, commit=True, push=True)
    other = git(clone, "log", "-1", "--format=%H", "--author=o@example.com")
    assert written.attempts == 2 and written.pushed and calls == [calls[0], other]
    assert git(clone, "ls-remote", "origin", "refs/heads/main").split()[0] == written.commit
    assert git(clone, "rev-parse", f"{written.commit}~1") == other  # on top of the other writer's commit
    assert '"7"' in git(clone, "show", f"main:{PRODUCTION}") and '"4"' in git(clone, "show", f"main:{STAGING}")
    assert change.after.stable_version == 4


def test_an_edit_that_no_longer_applies_after_the_race_is_refused(tmp_path: Path, clone: Path) -> None:
    """The drift rollback's edit in a fresh clone: someone promoted v7 to production meanwhile, so serving the
    fallback (v2 → v1) no longer applies: refused, and the remote keeps what that writer pushed."""
    from mlops_delivery import PromotionRefusedError, cloned_checkout, plan_fallback, write_overlay

    remote = git(clone, "remote", "get-url", "origin")
    _push_from_another_clone(remote, tmp_path, PRODUCTION, 1)
    _push_from_another_clone(remote, tmp_path, PRODUCTION, 2)
    cfg = DeliveryConfig(gitops_repo=remote)
    raced: list[str] = []

    def edit(root: Path):
        if not raced:
            raced.append(_push_from_another_clone(remote, tmp_path, PRODUCTION, 7))
        return plan_fallback(cfg, root, "fraud", "production", from_version=2, to_version=1, reason="drift")

    with cloned_checkout(cfg, remote) as checkout, pytest.raises(
            PromotionRefusedError, match="serves fraud v7, neither the drifted v2 nor the fallback v1"):
        write_overlay(cfg, checkout, edit, commit=True, push=True)
    assert git(clone, "ls-remote", "origin", "refs/heads/main").split()[0] == raced[0]
