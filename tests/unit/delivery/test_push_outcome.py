"""What a compare-and-swap push reports: moved the branch, found the very same commit there, or was rejected."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from mlops_delivery.git import push_outcome

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
    assert push_outcome(a, "origin", "main") == "pushed"
    assert push_outcome(b, "origin", "main") == "up_to_date"  # nothing moved: b did not create what the remote holds
    c = _clone(remote, tmp_path / "c")
    _commit(seed, "v3\n")  # seed is behind the remote now: its push must be refused, not forced
    assert push_outcome(seed, "origin", "main") == "rejected"
    assert _git(c, "ls-remote", "origin", "refs/heads/main").split()[0] == _git(a, "rev-parse", "HEAD")
