"""Every GitOps and repository push goes through one compare-and-swap (``mlops_delivery.git.push_compare_and_swap``):
the release's image pins (``mlops gitops set-images``) like the overlay changes, and the retraining branch.

Against real bare remotes in ``tmp_path``; the concurrent writer is another clone that pushes from a ``pre-push``
hook, i.e. between our read of the remote and our push (tests/support/git_race.py). Assertions read the remote
back with plain git.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mlops_config import DataConfig, DeliveryConfig
from mlops_config.delivery import RetrainConfig
from mlops_delivery import PushRejectedError, set_images
from mlops_delivery.overlay import MAX_ATTEMPTS
from mlops_delivery.retrain import RetrainTrigger, request_retrain
from tests.support.git_race import races_run, racing_writer

pytestmark = pytest.mark.integration

KUSTOMIZATIONS = ["infra/overlays/staging/kustomization.yaml", "infra/overlays/production/kustomization.yaml",
                  "infra/platform/kustomization.yaml"]
TRAINER = "ghcr.io/mlops-platform/trainer@sha256:" + "ab" * 32


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


def remote_tip(remote: Path, ref: str) -> str | None:
    listed = git(remote, "for-each-ref", "--format=%(objectname)", ref)
    return listed or None


@pytest.fixture
def repo(config_dir: Path, repo_root: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A working copy (configs/ and infra/) on ``main`` whose ``origin`` is a bare remote; (work, remote)."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    work = config_dir.parent
    shutil.copytree(repo_root / "infra", work / "infra")
    git(work, "init", "-q", "-b", "main")
    git(work, "add", ".")
    git(work, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "init")
    git(work, "remote", "add", "origin", str(remote))
    git(work, "push", "-q", "origin", "main")
    return work, remote


def test_set_images_honours_pull_request_mode(repo: tuple[Path, Path], github_pulls: list[dict[str, Any]]) -> None:
    """``delivery.commit_mode: pull_request`` (the production profile's): the pins go to a branch of their own and
    a pull request; main is not pushed. The old command committed on main and pushed it, ignoring commit_mode."""
    from mlops_cli.app import app

    work, remote = repo
    main0 = remote_tip(remote, "refs/heads/main")
    env = {"MLOPS_CONFIG_DIR": str(work / "configs"), "MLOPS_PROFILE": "local"}
    result = CliRunner().invoke(app, ["gitops", "set-images", "--image", TRAINER, "--commit", "--push", "--json",
                                      "--set", "delivery.commit_mode=pull_request"], env=env)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert remote_tip(remote, "refs/heads/main") == main0  # nothing landed on main
    assert git(work, "rev-parse", "HEAD") == main0 and git(work, "status", "--porcelain") == ""
    branch = out["branch"]
    assert branch.startswith("release/pin-images-") and out["pushed"] is True
    assert remote_tip(remote, f"refs/heads/{branch}") == out["commit"]
    assert git(remote, "rev-parse", f"{out['commit']}^") == main0
    assert sorted(git(remote, "show", "--name-only", "--format=", out["commit"]).split()) == sorted(KUSTOMIZATIONS)
    (call,) = github_pulls
    assert (call["body"]["head"], call["body"]["base"]) == (branch, "main")
    assert call["body"]["title"] == "release: pin images trainer@" + "ab" * 6
    assert out["pull_request"] == "https://github.example/o/r/pull/1"


def test_set_images_that_loses_the_race_lands_on_the_other_writers_commit(
        repo: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Commit mode: another writer pushes main between our read and our push; the compare-and-swap refuses ours,
    the pins are planned again on that writer's commit and land on top of it (nothing of it is overwritten)."""
    work, remote = repo
    other = racing_writer(monkeypatch, tmp_path, remote, "refs/heads/main")
    change = set_images([Path(k) for k in KUSTOMIZATIONS], [TRAINER], root=work,
                        delivery=DeliveryConfig(), commit=True, push=True)
    assert races_run(tmp_path) == 1 and change.pushed
    assert remote_tip(remote, "refs/heads/main") == change.commit
    assert git(remote, "rev-parse", f"{change.commit}^") == git(other, "rev-parse", "HEAD")
    assert git(remote, "show", "main:race.txt") == "race 0"  # the other writer's file survives
    assert "sha256:" + "ab" * 32 in git(remote, "show", f"main:{KUSTOMIZATIONS[0]}")


def test_set_images_that_keeps_losing_is_refused_by_name_and_the_remote_keeps_the_other_writer(
        repo: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work, remote = repo
    other = racing_writer(monkeypatch, tmp_path, remote, "refs/heads/main", times=MAX_ATTEMPTS)
    with pytest.raises(PushRejectedError) as lost:
        set_images([Path(k) for k in KUSTOMIZATIONS], [TRAINER], root=work, delivery=DeliveryConfig(), commit=True,
                   push=True)
    theirs = git(other, "rev-parse", "HEAD")
    assert races_run(tmp_path) == MAX_ATTEMPTS
    assert (lost.value.remote, lost.value.ref, lost.value.actual) == ("origin", "refs/heads/main", theirs)
    assert f"refs/heads/main is at {theirs}" in str(lost.value) and "rejected 5 times in a row" in str(lost.value)
    assert remote_tip(remote, "refs/heads/main") == theirs
    assert "sha256:" + "ab" * 32 not in git(remote, "show", f"main:{KUSTOMIZATIONS[0]}")
    # not silently dropped: the unpushed commit named in the error holds the pins
    assert "sha256:" + "ab" * 32 in git(work, "show", f"{lost.value.commit}:{KUSTOMIZATIONS[0]}")


def test_a_retraining_branch_that_loses_the_race_is_refused_by_the_same_error(
        repo: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The retraining branch is rebuilt under a lease on what the trigger saw (here: no branch yet); another
    trigger that pushes it meanwhile wins, ours is refused with the same error as set-images', nothing is
    published (no record ref) and the remote keeps the other trigger's branch."""
    _, remote = repo
    version = "1" * 31 + "b.dir"
    other = racing_writer(monkeypatch, tmp_path, remote, "refs/heads/retrain/fraud")
    cfg = DeliveryConfig(retrain=RetrainConfig(repo=str(remote), backend="git"))
    trigger = RetrainTrigger(model="fraud", reason="drift", evidence={"level": "CRITICAL"}, data_version=version)
    with pytest.raises(PushRejectedError) as lost:
        request_retrain(cfg, DataConfig(), tmp_path, trigger)
    theirs = git(other, "rev-parse", "HEAD")
    assert (lost.value.ref, lost.value.expected, lost.value.actual) == ("refs/heads/retrain/fraud",
                                                                        "absent (a new ref)", theirs)
    assert "another trigger rebuilt the retraining branch meanwhile" in str(lost.value)
    assert remote_tip(remote, "refs/heads/retrain/fraud") == theirs
    assert remote_tip(remote, "refs/retrain-prs/fraud") is None


def test_a_retraining_record_that_loses_the_race_is_refused_by_the_same_error(
        repo: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bare remote's pull-request record (``refs/retrain-prs/<model>``) is written under a lease on its last
    commit too: another trigger writing it meanwhile wins, and ours is refused by name."""
    _, remote = repo
    other = racing_writer(monkeypatch, tmp_path, remote, "refs/retrain-prs/fraud")
    cfg = DeliveryConfig(retrain=RetrainConfig(repo=str(remote), backend="git"))
    trigger = RetrainTrigger(model="fraud", reason="drift", evidence={"level": "CRITICAL"},
                             data_version="1" * 31 + "b.dir")
    with pytest.raises(PushRejectedError) as lost:
        request_retrain(cfg, DataConfig(), tmp_path, trigger)
    theirs = git(other, "rev-parse", "HEAD")
    assert (lost.value.ref, lost.value.expected, lost.value.actual) == ("refs/retrain-prs/fraud",
                                                                        "absent (a new ref)", theirs)
    assert "another trigger wrote the retraining record meanwhile" in str(lost.value)
    assert remote_tip(remote, "refs/retrain-prs/fraud") == theirs
    assert remote_tip(remote, "refs/heads/retrain/fraud") is not None  # the branch went first, unraced
