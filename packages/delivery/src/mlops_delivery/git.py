"""Recording a change in git: its files as one commit by the platform's author, pushed by the one compare-and-swap
push (:func:`push_compare_and_swap`) every GitOps and repository write goes through."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

from mlops_delivery.errors import GitError, PushRejectedError

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


def switch_branch(root: Path, branch: str, *, create: bool = False) -> None:
    """Check out ``branch`` (``create``: a new branch at HEAD)."""
    _git(root, "switch", "--quiet", *(["-c"] if create else []), branch)


REJECTED = ("[rejected]", "non-fast-forward", "fetch first", "stale info", "failed to update ref", "cannot lock ref")
"""What git prints when the remote's ref was not where the push expected it (the compare failed)."""


def run_git(root: Path | None, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run git (in ``root`` when given) and return the finished process, whatever its exit status."""
    cmd = ["git", *(["-C", str(root)] if root is not None else []), *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)


def push_compare_and_swap(root: Path, remote: str, ref: str, *, source: str = "HEAD", lease: str | None = None,
                          env: dict[str, str] | None = None) -> str:
    """Push ``source`` to ``remote``'s ``ref`` only if the ref is where this writer last saw it: the one push of
    every GitOps or repository change (overlays, image pins, retraining branches and records).

    Args:
        root: The clone to push from.
        remote: Remote name or URL.
        ref: A branch name or a full ref (``refs/retrain-prs/<model>``).
        source: What to push (a commit or a local ref).
        lease: ``None``: a plain (non-force) push, git's compare-and-swap on the ref: the remote takes it only as
            a fast-forward of what it holds. A SHA: the ref is rewritten (``--force-with-lease=<ref>:<sha>``) only
            if it is still at that SHA; ``""``: only if the ref does not exist yet.
        env: git's environment (a token header, fixed commit dates).

    Returns:
        ``"pushed"`` (the ref moved to ``source``) or ``"up_to_date"`` (the remote held it already: another writer
        pushed the very same commit, e.g. two processes making an identical commit in the same second).

    Raises:
        PushRejectedError: the ref moved since it was read (a concurrent writer): nothing was pushed, the remote
            keeps that writer's commit; the caller decides whether to re-plan or report it.
        GitError: the push failed for any other reason (no access, no such remote, a hook declined it, ...).
    """
    full = ref if ref.startswith("refs/") else f"refs/heads/{ref}"
    force = [] if lease is None else [f"--force-with-lease={full}:{lease}"]
    proc = run_git(root, "push", "--porcelain", *force, remote, f"{source}:{full}", env=env)
    if proc.returncode == 0:
        flags = [line.split("\t", 1)[0] for line in proc.stdout.splitlines() if "\t" in line]
        return "up_to_date" if flags and all(f.strip() == "=" for f in flags) else "pushed"
    text = proc.stdout + proc.stderr
    if any(marker in text for marker in REJECTED):
        sha = run_git(root, "rev-parse", "--verify", "--quiet", f"{source}^{{commit}}", env=env).stdout.strip()
        expected = (f"an ancestor of {sha[:12]} (a fast-forward)" if lease is None
                    else lease if lease else "absent (a new ref)")
        listed = run_git(root, "ls-remote", remote, full, env=env).stdout.split()
        logger.info("push to %s %s rejected: the ref moved on", remote, full)
        raise PushRejectedError(remote, full, expected, listed[0] if listed else None, commit=sha)
    detail = text.strip().splitlines()
    last = detail[-1] if detail else proc.returncode
    raise GitError(f"`git push {remote} {source}:{full}` failed in {str(root)!r}: {last}")


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
