"""What the one compare-and-swap push reports: moved the branch, found the very same commit there, or refused with
:class:`PushRejectedError` naming the remote, the ref, what it expected and what the remote holds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from mlops_delivery.errors import PushRejectedError
from mlops_delivery.git import push_compare_and_swap

SAME_SECOND = {"GIT_AUTHOR_DATE": "2026-12-01T06:00:00Z", "GIT_COMMITTER_DATE": "2026-12-01T06:00:00Z",
               "GIT_AUTHOR_NAME": "bot", "GIT_AUTHOR_EMAIL": "bot@x", "GIT_COMMITTER_NAME": "bot",
               "GIT_COMMITTER_EMAIL": "bot@x"}


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, **SAME_SECOND}).stdout.strip()


def _clone(remote: Path, dest: Path) -> Path:
    _git(remote.parent, "clone", "-q", str(remote), str(dest))
    return dest


def _commit(clone: Path, text: str) -> str:
    (clone / "overlay.yaml").write_text(text)
    _git(clone, "add", "overlay.yaml")
    _git(clone, "commit", "-qm", "gitops: rollback")
    return _git(clone, "rev-parse", "HEAD")


def test_identical_commits_from_two_writers_are_one_push_and_one_up_to_date(tmp_path: Path) -> None:
    remote = tmp_path / "r.git"
    _git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    seed = _clone(remote, tmp_path / "seed")
    _commit(seed, "v2\n")
    _git(seed, "push", "-q", "origin", "HEAD:refs/heads/main")
    a, b = _clone(remote, tmp_path / "a"), _clone(remote, tmp_path / "b")
    # two monitors make the same edit in the same second: git gives both the same commit id
    assert _commit(a, "v1\n") == _commit(b, "v1\n")
    assert push_compare_and_swap(a, "origin", "main") == "pushed"
    # nothing moved: b did not create what the remote holds
    assert push_compare_and_swap(b, "origin", "main") == "up_to_date"
    c = _clone(remote, tmp_path / "c")
    _commit(seed, "v3\n")  # seed is behind the remote now: its push must be refused, not forced
    tip = _git(a, "rev-parse", "HEAD")
    with pytest.raises(PushRejectedError) as lost:
        push_compare_and_swap(seed, "origin", "main")
    mine = _git(seed, "rev-parse", "HEAD")
    assert (lost.value.remote, lost.value.ref, lost.value.actual, lost.value.commit) == (
        "origin", "refs/heads/main", tip, mine)
    assert f"refs/heads/main is at {tip}, expected an ancestor of {mine[:12]}" in str(lost.value)
    assert _git(c, "ls-remote", "origin", "refs/heads/main").split()[0] == tip


def test_a_lease_rewrites_a_ref_only_where_it_was_seen(tmp_path: Path) -> None:
    """``--force-with-lease``: a rebuilt branch replaces the tip it was read at, and nothing else."""
    remote = tmp_path / "r.git"
    _git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    a = _clone(remote, tmp_path / "a")
    seen = _commit(a, "v1\n")
    assert push_compare_and_swap(a, "origin", "retrain/fraud", lease="") == "pushed"  # absent: created
    b = _clone(remote, tmp_path / "b")
    _git(b, "checkout", "-q", "-b", "x", "origin/retrain/fraud")
    moved = _commit(b, "v2\n")
    _git(b, "push", "-q", "origin", "HEAD:refs/heads/retrain/fraud")  # another trigger rebuilt it
    rebuilt = _commit(a, "v3\n")
    with pytest.raises(PushRejectedError, match=f"refs/heads/retrain/fraud is at {moved}, expected {seen}"):
        push_compare_and_swap(a, "origin", "retrain/fraud", lease=seen)
    with pytest.raises(PushRejectedError, match=f"is at {moved}, expected absent"):
        push_compare_and_swap(a, "origin", "retrain/fraud", lease="")
    assert _git(a, "ls-remote", "origin", "refs/heads/retrain/fraud").split()[0] == moved
    assert push_compare_and_swap(a, "origin", "retrain/fraud", lease=moved) == "pushed"  # the lease it now holds
    assert _git(a, "ls-remote", "origin", "refs/heads/retrain/fraud").split()[0] == rebuilt
