"""Recording a manifest edit in git: one file, one commit, an author of the platform's own."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

from mlops_delivery.errors import GitError

logger = logging.getLogger(__name__)


def _git(root: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise GitError(f"`git {' '.join(args)}` failed in {str(root)!r}: {detail[-1] if detail else proc.returncode}")
    return proc.stdout.strip()


def current_branch(root: Path) -> str:
    """The checked-out branch (an error on a detached HEAD: promotions must land on a branch)."""
    branch = _git(root, "rev-parse", "--abbrev-ref", "HEAD")
    if branch == "HEAD":
        raise GitError(f"{str(root)!r} is on a detached HEAD; check out the branch to promote on")
    return branch


def push_head(root: Path, remote: str = "origin") -> bool:
    """Push the current branch to ``remote`` (a rejected push, e.g. a concurrent promotion, is an error)."""
    branch = current_branch(root)
    _git(root, "push", "--quiet", remote, f"HEAD:refs/heads/{branch}")
    return True


def switch_branch(root: Path, branch: str, *, create: bool = False) -> None:
    """Check out ``branch`` (``create``: a new branch at HEAD)."""
    _git(root, "switch", "--quiet", *(["-c"] if create else []), branch)


REJECTED = ("[rejected]", "non-fast-forward", "fetch first", "stale info", "failed to update ref", "cannot lock ref")


def run_git(root: Path | None, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run git (in ``root`` when given) and return the finished process, whatever its exit status."""
    cmd = ["git", *(["-C", str(root)] if root is not None else []), *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)


def push_outcome(root: Path, remote: str, branch: str, env: dict[str, str] | None = None, *,
                 source: str = "HEAD") -> str:
    """Push ``source`` (HEAD) to ``remote``'s ``branch`` only if that branch has not moved since we fetched it,
    saying what happened: ``"pushed"`` (the branch moved to ``source``), ``"up_to_date"`` (the remote held it
    already: another writer pushed the very same commit, e.g. two processes making an identical commit in the
    same second) or ``"rejected"`` (the branch moved on).

    A plain (non-force) push is git's compare-and-swap on the branch ref: the remote accepts it only as a
    fast-forward of what it holds.

    Raises:
        GitError: the push failed for any other reason (no access, no such remote, ...).
    """
    proc = run_git(root, "push", "--porcelain", remote, f"{source}:refs/heads/{branch}", env=env)
    if proc.returncode == 0:
        flags = [line.split("\t", 1)[0] for line in proc.stdout.splitlines() if "\t" in line]
        return "up_to_date" if flags and all(f.strip() == "=" for f in flags) else "pushed"
    text = proc.stdout + proc.stderr
    if any(marker in text for marker in REJECTED):
        logger.info("push to %s/%s rejected: the branch moved on", remote, branch)
        return "rejected"
    detail = text.strip().splitlines()
    last = detail[-1] if detail else proc.returncode
    raise GitError(f"`git push {remote} {source}:{branch}` failed in {str(root)!r}: {last}")


def commit_files(root: Path, paths: list[Path], message: str, author: str) -> str:
    """Commit exactly ``paths`` as one commit (nothing else that is staged) and return its SHA."""
    if "<" not in author or not author.rstrip().endswith(">"):
        raise GitError(f"delivery.git_author must look like 'Name <email>', got {author!r}")
    name, _, email = author.partition("<")
    rel = [str(p.relative_to(root)) if p.is_absolute() else str(p) for p in paths]
    _git(root, "add", "--", *rel)
    _git(root, "-c", f"user.name={name.strip()}", "-c", f"user.email={email.rstrip('>').strip()}",
         "commit", "--quiet", "-m", message, "--", *rel)
    sha = _git(root, "rev-parse", "HEAD")
    logger.info("committed %s as %s", ", ".join(rel), sha[:12])
    return sha
